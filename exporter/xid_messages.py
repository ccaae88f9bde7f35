"""XID number -> the short text dcgm-exporter puts in the ``err_msg`` label of its XID series.

Used only by ``--compat dcgm`` rendering (:mod:`exporter.exposition`): dcgm-exporter labels
``DCGM_FI_DEV_XID_ERRORS`` with ``err_code`` and ``err_msg``, and dashboards and alert rules
written for it match on them. Texts follow NVIDIA's XID catalogue
(https://docs.nvidia.com/deploy/xid-errors/) as dcgm-exporter words them
(internal/pkg/collector/xid_errors.go); an XID missing here is "Unknown Error", as there.
What an XID *means* for operations (severity, action) is the analyzer's business, not this
table's.
"""

from __future__ import annotations

UNKNOWN = "Unknown Error"

MESSAGES: dict[int, str] = {
    0: "No Error",
    8: "GPU stopped processing",
    13: "Graphics Engine Exception",
    31: "GPU memory page fault",
    32: "Invalid or corrupted push buffer stream",
    38: "Driver firmware error",
    43: "GPU stopped processing",
    44: "Graphics Engine fault during context switch",
    45: "Preemptive cleanup, due to previous errors -- Most likely to see when running multiple"
    " cuda",
    48: "Double Bit ECC Error",
    56: "Display Engine error",
    57: "Error programming video memory interface",
    58: "Unstable video memory interface detected",
    61: "Internal micro-controller breakpoint/warning",
    62: "Internal micro-controller halt",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure",
    65: "Video processor exception",
    68: "NVDEC0 Exception",
    69: "Graphics Engine class error",
    74: "NVLINK Error",
    79: "GPU has fallen off the bus",
    80: "Corrupted data sent to GPU",
    81: "VGA Subsystem Error",
    92: "High single-bit ECC error rate",
    93: "Non-fatal violation of provisioned InfoROM wear limit",
    94: "Contained ECC error",
    95: "Uncontained ECC error",
    109: "Context Switch Timeout Error",
    110: "Security Fault Error",
    119: "GSP RPC Timeout",
    120: "GSP Error",
    121: "C2C Link Error",
    140: "Unrecovered ECC Error",
    143: "GPU Initialization Failure",
    144: "NVLINK: Saw Error",
    145: "NVLINK: RLW Error",
    149: "NVLINK: NETIR Error",
    150: "NVLINK: MSE Error",
    154: "GPU Recovery Action Changed",
    155: "NVLINK: SW Defined Error",
}


def message(xid: int) -> str:
    return MESSAGES.get(xid, UNKNOWN)
