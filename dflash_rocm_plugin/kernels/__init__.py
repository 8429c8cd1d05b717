"""Triton kernels. Framework-free: nothing here imports a serving host.

Import this package only after deciding on ``TRITON_INTERPRET``: Triton reads
it when the kernels are decorated.
"""
