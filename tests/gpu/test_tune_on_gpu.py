"""``dflash-rocm tune`` on the GPU: a tuned entry never loses to the default it replaces.

The tuner runs for real (graph replay and cache-flushed timing, bf16) on a small grid into a
temporary file.  Then, for every bucket it wrote, the bucket is measured afresh twice -- with the
file in force, and with only what a user file replaces (shipped file and rules) -- and the tuned
launch must be correct and no slower than the default on either clock (3 % for run-to-run noise).
A graph captured with the file in force replays the tuned kernels bit for bit.
"""

import pytest
import torch

from dflash_rocm_plugin import ops
from dflash_rocm_plugin.ops import tuned
from dflash_rocm_plugin.tune import cli, measure, space as space_mod
from tests.conftest import clear_tuned_caches

pytestmark = pytest.mark.gpu
NOISE = 1.03


@pytest.fixture(scope="module")
def tuned_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tuned")
    # Two buckets, a split-KV draft block and a long decode batch: about 3 minutes on an H200.
    shapes = (space_mod.buckets(["draft-q16"], (32, 8, 128), [16], [(8, 4096)])
              + space_mod.buckets(["decode"], (32, 8, 128), [1], [(32, 16384)]))
    args = cli._parser().parse_args(["--out", str(tmp), "--budget-min", "5", "--no-progress"])
    with pytest.MonkeyPatch.context() as m:
        m.setenv(tuned.ENV, str(tmp))
        clear_tuned_caches()
        assert cli.run(args, shapes, torch.device("cuda")) == 0
    clear_tuned_caches()
    path = tmp / f"{ops.gpu_arch()}.json"
    entries = ops.read_tuned_file(path, ops.gpu_arch()) if path.exists() else []
    return {"entries": entries, "shapes": shapes, "dir": tmp}


def _in_force(monkeypatch, directory):
    monkeypatch.setenv(tuned.ENV, str(directory))
    clear_tuned_caches()


def _bench_of(shape):
    return measure.BucketBench(shape, torch.device("cuda"), torch.bfloat16, measure.gpu_timer)


def test_every_written_entry_is_correct_and_no_slower_than_the_default(tuned_run, monkeypatch):
    _in_force(monkeypatch, tuned_run["dir"])
    keys = {(e["causal"], e["q"], e["batch"], e["context"], e["page"]) for e in tuned_run["entries"]}
    checked = 0
    for shape in tuned_run["shapes"]:
        bench = _bench_of(shape)
        if (shape.causal, *bench.bucket) not in keys:
            continue
        with ops.tuned_sources("shipped"):
            default = bench.run(measure.Candidate("default", "auto"))
        tuned_ = bench.run(measure.Candidate("tuned", "auto"))
        assert default.ok and tuned_.ok, (default.error, tuned_.error)
        assert tuned_.ran != default.ran, "the file in force did not change the launch"
        assert tuned_.timing.graph_us <= default.timing.graph_us * NOISE, (shape.label, tuned_.ran, default.ran)
        assert tuned_.timing.flushed_us <= default.timing.flushed_us * NOISE, (shape.label, tuned_.ran, default.ran)
        checked += 1
    assert checked == len(tuned_run["entries"])


def test_graph_replay_runs_the_tuned_launch(tuned_run, monkeypatch):
    if not tuned_run["entries"]:
        pytest.skip("the tuner wrote no entry on this GPU (every default won)")
    _in_force(monkeypatch, tuned_run["dir"])
    e = tuned_run["entries"][0]
    bench = next(b for b in map(_bench_of, tuned_run["shapes"])
                 if (b.shape.causal, *b.bucket) == (e["causal"], e["q"], e["batch"], e["context"], e["page"]))
    if e.get("launch"):
        assert dict(measure.fields_of(bench.describe(backend="triton").launch)) == e["launch"]
    calls = bench._calls("auto")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        calls[0]()  # compiles outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        calls[0]()
    bench.outs[0].fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    replayed = bench.outs[0].clone()
    bench.outs[0].fill_(float("nan"))
    calls[0]()
    torch.cuda.synchronize()
    assert torch.isfinite(replayed).all() and torch.equal(replayed, bench.outs[0])
