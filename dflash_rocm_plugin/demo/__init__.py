"""``dflash-rocm demo``: whole DFlash speculative decoding with every attention call on the plugin's ops.

    config.py       target/draft configuration, parsed from published config.json files and validated
    layers.py       the Qwen3 building blocks shared by target and draft (RMSNorm, RoPE, attention, MLP)
    model.py        the Qwen3 target: forward over any attention callback, DFlash layer capture
    draft.py        the DFlash draft: context K/V injection, one non-causal block forward
    paged_cache.py  page allocator, paged K/V caches, and the attention callback over ``ops``
    speculative.py  batched greedy DFlash decoding and the independent target-only greedy run
    tiny.py         the seeded tiny target and its cheaply distilled tiny draft
    checkpoint.py   loading/saving the published formats (safetensors, imported lazily)
    cli.py          ``main(argv)``
"""
