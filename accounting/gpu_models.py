"""GPU model names as one canonical SKU per board, so that the spellings of one SKU share an
MTBF cell and two SKUs never do.

A reliability cell is a SKU: the family with its form factor and memory size (another board,
cooling, power and memory stack: A100 40 GB and 80 GB, SXM and PCIe, fail apart). The
canonical spelling is ``<family> <form> <memory>GB``: ``NVIDIA A100-SXM4-80GB`` (NVML),
``A100 80GB SXM`` (a topology file), ``A100-SXM4-80GB`` (an older driver, an RMA record) are
all ``A100 SXM4 80GB``; ``NVIDIA H100 80GB HBM3`` (NVML's name of the SXM5 board) is
``H100 SXM5 80GB``. A name this module cannot read as one SKU (no family, a family without
its memory size or form factor, or a contradiction such as an H100 "SXM4") is kept as given,
so it is merged with nothing but its own spelling: a bare ``H100`` may be PCIe or SXM and
stays ``H100``.

Where the spellings come from (facts only; names as NVML reports them, ``nvidia-smi
--query-gpu=name`` and dcgm-exporter's ``modelName``): ``NVIDIA A100-SXM4-80GB``, ``NVIDIA
H100 80GB HBM3``, ``NVIDIA H100 PCIe`` and ``NVIDIA H200`` as listed by
github.com/neuralinternet/SN27 pull 291; ``A100-SXM4-80GB`` in github.com/vllm-project/vllm
issue 10026; ``Tesla V100-SXM2-16GB``, ``A100-PCIE-40GB``, ``NVIDIA-A100-SXM4-80GB``,
``NVIDIA-A10`` (GPU feature discovery's dashed ``nvidia.com/gpu.product`` labels) in
github.com/vllm-project/aibrix pull 2388; ``Tesla P4`` in github.com/pytimer/gpu-exporter's
README; ``NVIDIA A100 80GB PCIe``, ``NVIDIA H100 NVL`` and ``NVIDIA L40S`` as the fixtures
and the specification table (exporter/catalog_specs.py) spell them. Memory sizes and form
factors of one-SKU families and of names without them are NVIDIA's datasheets' (H100 PCIe
80 GB, H100 NVL 94 GB, H200 141 GB on SXM5 and NVL, A10/A10G/A30/L4 24 GB, A40/L40/L40S
48 GB, T4 16 GB, all PCIe cards).

AMD Instinct GPUs are spelt the same way, ``<family> OAM <memory>GB``: amd-smi's market name
as DME labels it (``card_model="AMD Instinct MI300X OAM"``, fixtures/amd-dme/), the same name
without the form factor, or a bare ``MI300X`` (a topology file) are all ``MI300X OAM 192GB``;
MI325X and MI355X likewise. Their form factor (OAM modules) and HBM size are the
specification table's (exporter/catalog_specs.py, AMD's data sheets: 192, 256 and 288 GB). An
Instinct name this module does not know as one board (an MI300A APU, a virtual function's
``... VF``, a memory size the family does not come in) is kept as given.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

from accounting.model import Exposure, Incident
from exporter import catalog_specs

# NVIDIA's data-centre families: a letter or two and 1-3 digits, optionally suffix letters
# (A100, H100, GB200, V100S, A10G, L40S, T4, K20Xm); a word of its own.
FAMILY = re.compile(r"^G?[A-Z]{1,2}\d{1,3}[A-Z]{0,2}$")
MEMORY = re.compile(r"^(\d{1,4})(?:GB|G)$")
FORM = re.compile(r"^(SXM\d?|PCIE|NVL|OAM)$")
VENDOR = {"NVIDIA", "TESLA", "AMD", "INSTINCT"}
NOISE = {"HBM2", "HBM2E", "HBM3", "HBM3E"}  # the memory's kind: not part of the SKU's name
# The SXM generation each family's SXM board has (a name that says only "SXM").
SXM = {"P100": "SXM2", "V100": "SXM2", "A100": "SXM4", "A800": "SXM4", "H100": "SXM5",
       "H800": "SXM5", "H200": "SXM5"}  # fmt: skip
# What NVML's name leaves out: (family, form or None) -> (form, memory GB or None). A None
# memory: the name must say it (A100 PCIe comes with 40 and 80 GB).
ONE_SKU = {"A10": 24, "A10G": 24, "A30": 24, "L4": 24, "A40": 48, "L40": 48, "L40S": 48, "T4": 16}
# AMD Instinct OAM modules: family -> HBM GB, from the specification table
AMD_OAM = {s.key.upper(): round(s.memory_bytes / catalog_specs.GB)
           for s in catalog_specs.SPECS if s.form == "oam"}  # fmt: skip
IMPLIED: dict[tuple[str, str | None], tuple[str, int | None]] = {
    ("H100", None): ("SXM5", None),  # "NVIDIA H100 80GB HBM3" (with HBM3): the SXM5 board
    ("H100", "PCIe"): ("PCIe", 80),
    ("H100", "NVL"): ("NVL", 94),
    ("H200", None): ("SXM5", 141),  # "NVIDIA H200"
    ("H200", "SXM5"): ("SXM5", 141),
    ("H200", "NVL"): ("NVL", 141),
    **{(f, None): ("PCIe", gb) for f, gb in ONE_SKU.items()},  # one-SKU PCIe cards
    **{(f, "PCIe"): ("PCIe", gb) for f, gb in ONE_SKU.items()},
    **{(f, form): ("OAM", gb) for f, gb in AMD_OAM.items() for form in (None, "OAM")},
}


def _words(name: str) -> list[str]:
    spaced = re.sub(r"[-_/,()]+", " ", name.upper())
    words = re.sub(r"(\d)\s+(GB|G)\b", r"\1\2", spaced).split()  # "80 GB" is "80GB"
    return [w for w in words if w not in VENDOR]


def sku(name: str) -> str:
    """The canonical SKU of a model name, or the name as given (stripped) when it is not
    one SKU: ``NVIDIA A100-SXM4-80GB`` -> ``A100 SXM4 80GB``; ``H100`` -> ``H100``."""
    given = name.strip()
    families, memory, forms, rest, hbm = [], [], [], [], False
    for word in _words(given):
        if word in NOISE:
            hbm = True
        elif FORM.match(word):
            forms.append("PCIe" if word == "PCIE" else word)
        elif (m := MEMORY.match(word)) is not None:
            memory.append(int(m.group(1)))
        elif FAMILY.match(word):
            families.append(word)
        else:
            rest.append(word)
    if len(families) != 1 or len(memory) > 1 or len(forms) > 1 or rest:
        return given
    family = families[0]
    form = forms[0] if forms else None
    if (form == "OAM") != (family in AMD_OAM) and form is not None:
        return given  # an OAM module NVIDIA never made, an SXM/PCIe board AMD's family is not
    if family == "H100" and form is None and not hbm:
        return given  # "H100 80GB" may be the PCIe card; NVML names the SXM5 board "... HBM3"
    if form == "SXM" and family in SXM:
        form = SXM[family]
    elif form is not None and form.startswith("SXM") and SXM.get(family, form) != form:
        return given  # an SXM generation this family never had
    implied_form, implied_gb = IMPLIED.get((family, form), (form, None))
    gb = memory[0] if memory else implied_gb
    if implied_gb is not None and gb != implied_gb:
        return given  # a memory size this SKU does not come in
    if implied_form is None or gb is None:
        return given
    return f"{family} {implied_form} {gb}GB"


def normalised(
    incidents: Sequence[Incident], exposure: Sequence[Exposure]
) -> tuple[list[Incident], list[Exposure], dict[str, tuple[str, ...]]]:
    """The same records with every model spelt as its SKU, and per SKU the names it was
    given (sorted), so that a report can show what it merged."""
    names: dict[str, set[str]] = {}
    out_incidents, out_exposure = [], []
    for inc in incidents:
        canonical = sku(inc.gpu_model)
        names.setdefault(canonical, set()).add(inc.gpu_model.strip())
        out_incidents.append(dataclasses.replace(inc, gpu_model=canonical))
    for row in exposure:
        canonical = sku(row.gpu_model)
        names.setdefault(canonical, set()).add(row.gpu_model.strip())
        out_exposure.append(dataclasses.replace(row, gpu_model=canonical))
    return out_incidents, out_exposure, {k: tuple(sorted(v)) for k, v in names.items()}
