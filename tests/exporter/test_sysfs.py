"""DirSysfs reads a real tree (following the kernel's symlinks); DictSysfs fakes one in memory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from exporter.catalog import IB_COUNTER, IB_PORT_STATE
from exporter.collectors.infiniband import InfinibandCollector
from exporter.sources.sysfs import DictSysfs, DirSysfs


def make_tree(root: Path, files: dict[str, str | bytes]) -> None:
    for rel, content in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content)


def test_dir_sysfs_lists_reads_and_tells_directories_from_files(tmp_path):
    make_tree(tmp_path, {"class/infiniband/mlx5_0/fw_ver": "28.39.1002\n"})
    fs = DirSysfs(tmp_path)
    assert fs.listdir("class/infiniband") == ["mlx5_0"]
    assert fs.read_text("class/infiniband/mlx5_0/fw_ver") == "28.39.1002\n"
    assert fs.is_dir("class/infiniband/mlx5_0")
    assert not fs.is_dir("class/infiniband/mlx5_0/fw_ver")
    assert not fs.is_dir("class/net")


def test_dir_sysfs_raises_the_filesystem_errors_for_missing_paths(tmp_path):
    fs = DirSysfs(tmp_path)
    with pytest.raises(FileNotFoundError):
        fs.listdir("class/infiniband")
    with pytest.raises(FileNotFoundError):
        fs.read_text("class/infiniband/mlx5_0/fw_ver")


@pytest.mark.parametrize("bad", ["../etc/passwd", "/etc/passwd", "class/../../etc/passwd"])
def test_dir_sysfs_refuses_paths_that_escape_the_root(tmp_path, bad):
    with pytest.raises(ValueError, match="inside the root"):
        DirSysfs(tmp_path / "sys").read_text(bad)


def test_dir_sysfs_follows_class_symlinks_into_devices_like_the_kernel_lays_them_out(tmp_path):
    dev = "devices/pci0000:00/0000:00:02.0/0000:3b:00.0/infiniband/mlx5_0"
    make_tree(
        tmp_path,
        {
            f"{dev}/fw_ver": "28.39.1002\n",
            f"{dev}/ports/1/state": "4: ACTIVE\n",
            f"{dev}/ports/1/counters/symbol_error": "3\n",
        },
    )
    (tmp_path / "class/infiniband").mkdir(parents=True)
    os.symlink(f"../../{dev}", tmp_path / "class/infiniband/mlx5_0")
    fs = DirSysfs(tmp_path)
    assert fs.listdir("class/infiniband") == ["mlx5_0"]
    assert fs.is_dir("class/infiniband/mlx5_0")
    samples = InfinibandCollector(fs, "n1").collect()
    assert {(s.metric.name, s.value) for s in samples} >= {
        (IB_PORT_STATE.name, 4.0),
        (IB_COUNTER.name, 3.0),
    }


def test_dir_sysfs_hands_binary_garbage_to_the_parser_instead_of_failing_to_decode(tmp_path):
    make_tree(tmp_path, {"x/counter": b"\xff\xfe\x00\x01"})
    text = DirSysfs(tmp_path).read_text("x/counter")
    assert "\ufffd" in text


def test_dict_sysfs_implies_directories_from_its_files():
    fs = DictSysfs({"class/infiniband/mlx5_0/ports/1/state": "4: ACTIVE\n"})
    assert fs.listdir("class/infiniband") == ["mlx5_0"]
    assert fs.listdir("class/infiniband/mlx5_0/ports") == ["1"]
    assert fs.listdir("") == ["class"]
    assert fs.is_dir("class/infiniband/mlx5_0/ports/1")
    assert not fs.is_dir("class/infiniband/mlx5_0/ports/1/state")
    assert fs.read_text("class/infiniband/mlx5_0/ports/1/state") == "4: ACTIVE\n"


def test_dict_sysfs_raises_like_a_filesystem():
    fs = DictSysfs({"a/b": "1"})
    with pytest.raises(FileNotFoundError):
        fs.read_text("a/c")
    with pytest.raises(FileNotFoundError):
        fs.listdir("z")
    with pytest.raises(IsADirectoryError):
        fs.read_text("a")
    with pytest.raises(NotADirectoryError):
        fs.listdir("a/b")
    with pytest.raises(NotADirectoryError):
        fs.set("a/b/c", "1")
    with pytest.raises(IsADirectoryError):
        fs.set("a", "1")
    with pytest.raises(ValueError, match="inside the root"):
        fs.read_text("../a/b")


def test_dict_sysfs_set_overwrites_and_adds_files():
    fs = DictSysfs({"p/counters/symbol_error": "1"})
    fs.set("p/counters/symbol_error", "2")
    fs.set("p/counters/link_downed", "0")
    assert fs.read_text("p/counters/symbol_error") == "2"
    assert fs.listdir("p/counters") == ["link_downed", "symbol_error"]


def test_dict_sysfs_remove_of_a_directory_drops_everything_under_it_and_empty_parents():
    fs = DictSysfs({"c/ib/mlx5_0/fw_ver": "1", "c/ib/mlx5_0/ports/1/state": "4", "d/x": "1"})
    fs.remove("c/ib/mlx5_0")
    assert not fs.is_dir("c/ib/mlx5_0/ports")
    assert not fs.is_dir("c")
    assert fs.listdir("") == ["d"]
    fs.set("c/ib/mlx5_0/ports/1/state", "1")
    assert fs.listdir("c/ib/mlx5_0/ports/1") == ["state"]
    with pytest.raises(FileNotFoundError):
        fs.remove("c/ib/mlx5_1")


def test_dict_sysfs_remove_of_a_file_keeps_its_siblings():
    fs = DictSysfs({"p/a": "1", "p/b": "2"})
    fs.remove("p/a")
    assert fs.listdir("p") == ["b"]
    fs.remove("p/b")
    assert not fs.is_dir("p")


def test_dict_sysfs_fail_makes_reads_and_listings_raise_until_healed():
    fs = DictSysfs({"p/counters/symbol_error": "1"})
    fs.fail("p/counters/symbol_error", PermissionError(13, "Permission denied"))
    fs.fail("p/counters", OSError(5, "Input/output error"))
    with pytest.raises(PermissionError):
        fs.read_text("p/counters/symbol_error")
    with pytest.raises(OSError, match="Input/output"):
        fs.listdir("p/counters")
    fs.heal("p/counters/symbol_error")
    fs.heal("p/counters")
    assert fs.read_text("p/counters/symbol_error") == "1"
    assert fs.listdir("p/counters") == ["symbol_error"]
