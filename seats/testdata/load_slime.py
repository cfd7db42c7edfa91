"""Loads troupe samples with slime's own Sample (slime/utils/types.py).

usage: load_slime.py SLIME_CHECKOUT SAMPLES.jsonl

slime's types.py imports torch at the top, for type annotations and for
top-p helpers that Sample.from_dict and to_dict never call, and a helper
of slime.utils.misc (which imports more of slime's dependencies). When
torch is not installed, both are stubbed with modules whose names are
placeholders, which types.py reads at import time for annotations only; the Sample class, from_dict and
to_dict are slime's own code, unchanged.
"""

import importlib.util
import json
import sys
import types


def stub_imports():
    try:
        import torch  # noqa: F401
    except ImportError:
        torch = types.ModuleType("torch")
        # Every name types.py reads of torch (Tensor, dtype, ...) is a
        # placeholder class: it only appears in annotations.
        torch.__getattr__ = lambda name: type(name, (), {})
        sys.modules["torch"] = torch
    for name in ("slime", "slime.utils"):
        mod = types.ModuleType(name)
        mod.__path__ = []
        sys.modules.setdefault(name, mod)
    misc = types.ModuleType("slime.utils.misc")

    def decode_int32_meta_array(*args, **kwargs):
        raise AssertionError("not called by from_dict or to_dict")

    misc.decode_int32_meta_array = decode_int32_meta_array
    sys.modules["slime.utils.misc"] = misc


def main():
    checkout, path = sys.argv[1], sys.argv[2]
    stub_imports()
    spec = importlib.util.spec_from_file_location("slime.utils.types", f"{checkout}/slime/utils/types.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["slime.utils.types"] = mod
    spec.loader.exec_module(mod)
    Sample = mod.Sample
    n = trained = 0
    with open(path) as f:
        for line in f:
            d = json.loads(line)
            s = Sample.from_dict(d)
            assert isinstance(s.status, Sample.Status), s.status
            assert s.rollout_id == d["rollout_id"] and isinstance(s.rollout_id, int)
            if s.tokens:
                assert s.response_length >= 1 and len(s.tokens) > s.response_length
                assert len(s.loss_mask) == s.response_length == len(s.rollout_log_probs)
                assert s.effective_response_length == sum(s.loss_mask)
                trained += 1
            back = s.to_dict()
            for k in ("tokens", "response", "response_length", "loss_mask", "rollout_log_probs", "reward", "metadata", "prompt"):
                assert back[k] == d.get(k, back[k]), k
            assert back["status"] == d["status"]
            n += 1
    print(f"{n} samples loaded with slime's Sample ({trained} with tokens)")


if __name__ == "__main__":
    main()
