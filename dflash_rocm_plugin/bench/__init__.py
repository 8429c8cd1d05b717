"""``dflash-rocm bench``: the paged-attention kernel on DFlash draft/verify shapes, with optional peers.

Modules: ``shapes`` (the grid), ``inputs`` (paged caches on the GPU), ``timing`` (graph replay and
event medians, the copy ceiling), ``peers`` (peer kernels loaded at run time from downloaded
sources), ``report`` (table, JSON, PNG), ``cli`` (the command).
"""
