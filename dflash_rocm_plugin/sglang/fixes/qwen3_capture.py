"""Qwen3 target: ``set_dflash_layers_to_capture``.

DFLASH asks the target model for the hidden states of a few layers through
``set_dflash_layers_to_capture(layer_ids)``, where id ``i`` means the OUTPUT of layer ``i``
(the DFlash / Hugging Face convention).  SGLang's model loop captures the residual stream
*before* layer ``j`` when ``j`` is in ``model.layers_to_capture``, so the method stores
``[i + 1 for i in layer_ids]``.  sgl-project/sglang#22342 added it to Qwen3; every release
with DFLASH has it.  Source builds from between #22077 and #22342 lack it.

Probe: the method's presence on ``Qwen3ForCausalLM``, and, when present, its behaviour on a
stand-in model (it must store ``i + 1``).  Needs the EAGLE3 capture machinery
(``set_eagle3_layers_to_capture``) the method relies on; refused without it.
Patch: the method below is added to the class.
"""

from __future__ import annotations

import types

from dflash_rocm_plugin.hostfix import Probe
from dflash_rocm_plugin.hostfix import code as _code

FIX_ID = "sglang-qwen3-dflash-capture"
MODULE = "sglang.srt.models.qwen3"


def set_dflash_layers_to_capture(self, layer_ids):
    if not self.pp_group.is_last_rank:
        return
    if layer_ids is None:
        raise ValueError("DFLASH requires explicit layer_ids for aux hidden capture.")
    self.capture_aux_hidden_states = True
    # DFlash id i is the output of layer i, i.e. the residual stream before layer i + 1.
    self.model.layers_to_capture = [i + 1 for i in layer_ids]


_code.mark(set_dflash_layers_to_capture, FIX_ID)


def captured_before(method, layer_ids):
    """Run ``method`` on a stand-in model; return what it stored as layers_to_capture."""
    stand_in = types.SimpleNamespace(pp_group=types.SimpleNamespace(is_last_rank=True),
                                     model=types.SimpleNamespace(), capture_aux_hidden_states=False)
    method(stand_in, list(layer_ids))
    return list(stand_in.model.layers_to_capture), stand_in.capture_aux_hidden_states


def probe_class(cls) -> Probe:
    method = getattr(cls, "set_dflash_layers_to_capture", None)
    if method is not None:
        if _code.is_marked(method):
            return Probe.not_needed("already patched")
        ids = [1, 9, 17]
        try:
            stored, enabled = captured_before(method, ids)
        except Exception as exc:  # noqa: BLE001
            return Probe.not_needed(f"{cls.__name__} has its own set_dflash_layers_to_capture "
                                    f"(not checked on a stand-in: {exc!r})")
        if stored == [i + 1 for i in ids] and enabled:
            return Probe.not_needed(f"{cls.__name__}.set_dflash_layers_to_capture present (before layer i+1)")
        return Probe.refuse(f"{cls.__name__}.set_dflash_layers_to_capture stores {stored} for ids {ids}; "
                            "expected i+1 - left alone")
    if not hasattr(cls, "set_eagle3_layers_to_capture"):
        return Probe.refuse(f"{cls.__name__} has no aux hidden-state capture (set_eagle3_layers_to_capture)")
    return Probe.need(f"{cls.__name__} lacks set_dflash_layers_to_capture", cls)


def probe() -> Probe:
    module = _code.optional_module(MODULE)
    if module is None or not hasattr(module, "Qwen3ForCausalLM"):
        return Probe.not_needed("this sglang has no Qwen3ForCausalLM")
    return probe_class(module.Qwen3ForCausalLM)


def patch(cls) -> str:
    cls.set_dflash_layers_to_capture = set_dflash_layers_to_capture
    return f"{cls.__name__}.set_dflash_layers_to_capture added (layers_to_capture = ids + 1)"
