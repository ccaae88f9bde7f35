"""The GPU reset rung (``reset_gpu``, before ``reboot``): reset one GPU instead of rebooting
the node. Configuration (``config``), the job that resets and verifies (``job``) and the
verdict over its output (``verdict``); the executor drives it as a saga of persisted steps.
"""
