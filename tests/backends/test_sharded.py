"""The sharded trainer (FSDP2 over gloo, 2 local processes) against the plain one-process
trainer: same data, seed and global batch, so the same loss curve up to summation order.

Marked slow: each test spawns two processes that import torch (about 15 s on 2 cores)."""

from __future__ import annotations

import dataclasses
import math
import shutil
from pathlib import Path

import pytest
import torch
from torch.distributed.checkpoint import FileSystemReader

from dwtune.backends.pytorch.checkpoint import TRAINER_FILE
from dwtune.backends.pytorch.perf import PEAK_ENV
from dwtune.backends.pytorch.sharded import check_divides, mixed_precision
from dwtune.backends.pytorch.train import train_model
from dwtune.core import vocabulary
from dwtune.core.budget import ModelShape
from dwtune.core.errors import InputError
from dwtune.core.spec import spec_from_dict
from tests.helpers.sharded import run_sharded_jobs

# Two blocks, so FSDP shards the blocks and the root separately; untied head.
SHAPE = ModelShape(depth=2, width=16, heads=2, vocab_size=96, seq_len=16)
CURVE = (vocabulary.TRAIN_LOSS, vocabulary.VAL_LOSS, vocabulary.GRAD_NORM)
# float32 sums in another order (a slice mean, then the ranks' mean; sharded AdamW): the
# curves agree to about 1e-6 relative; a wrong gradient scale or batch slice moves them 1e-2.
RTOL = 1e-4


@pytest.fixture(scope="module", autouse=True)
def fixed_peak():
    """A given peak FLOP/s (the CPU's is calibrated, and differs with the thread count), here
    and in the ranks, which inherit the environment."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(PEAK_ENV, "1e12")
        yield


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    return spec_from_dict(
        {
            "name": "sharded",
            "space": {"depths": [2], "budgets": [1e4]},
            "data": {
                "cache_dir": str(tmp_path_factory.mktemp("token-cache")),
                "seq_len": 16,
                "vocab_size": 96,
            },
            "model": {"width_multiple": 2},
            "train": {
                "steps": 20,
                "batch_size": 4,
                "lr": 3e-3,
                "warmup_steps": 3,
                "eval_every": 5,
                "eval_batches": 2,
            },
        }
    )


@pytest.fixture(scope="module")
def plain(spec, tmp_path_factory):
    reports: list[dict] = []
    directory = tmp_path_factory.mktemp("plain")
    final = train_model(
        spec, SHAPE, 0, lambda m, _c: reports.append(m), checkpoint_dir=str(directory)
    )
    return reports, final


def curve(reports: list[dict]) -> list[tuple]:
    return [(r[vocabulary.STEP], *(r[k] for k in CURVE)) for r in reports]


def assert_close(got: list[tuple], want: list[tuple]) -> None:
    assert [g[0] for g in got] == [w[0] for w in want]  # the same evaluation steps
    for g, w in zip(got, want, strict=True):
        for a, b in zip(g[1:], w[1:], strict=True):
            assert math.isclose(a, b, rel_tol=RTOL), (g, w)


def micro_batched(spec, **train):
    return dataclasses.replace(spec, train=dataclasses.replace(spec.train, **train))


@pytest.mark.slow
def test_two_sharded_workers_reach_the_plain_trials_loss_curve(spec, plain, tmp_path):
    """Sharded in one pass per worker, and sharded with each worker's 2 rows as 2
    micro-batches of 1 (checkpointed blocks): both follow the plain trial's curve."""
    reports, final = plain
    split = micro_batched(spec, micro_batch_size=1, activation_checkpointing="true")
    ranks, split_ranks = run_sharded_jobs(
        tmp_path,
        2,
        [{"spec": spec, "shape": SHAPE, "seed": 0}, {"spec": split, "shape": SHAPE, "seed": 0}],
    )
    for rank in split_ranks:
        assert rank["final"][vocabulary.STATUS] == vocabulary.STATUS_FINISHED
        assert rank["passes"] == [1, 1] * 20  # every step: 2 passes of 1 row, none of 2
        assert len(rank["checkpointed"]) == 2 * 2 * 20  # 2 blocks per pass
        assert_close(curve(rank["reports"]), curve(reports))
    assert all(rank["passes"] == [2] * 20 and not rank["checkpointed"] for rank in ranks)
    for rank in ranks:
        assert_close(curve(rank["reports"]), curve(reports))
        assert rank["final"][vocabulary.STATUS] == vocabulary.STATUS_FINISHED
        # the held-out windows are gathered in order: the same per-window losses
        windows = rank["final"][vocabulary.VAL_WINDOWS]
        assert len(windows) == len(final[vocabulary.VAL_WINDOWS])
        for a, b in zip(windows, final[vocabulary.VAL_WINDOWS], strict=True):
            assert math.isclose(a, b, rel_tol=RTOL)
    # MFU against the peak of both workers: per token/s, half the one-process trial's
    per_rate = [r[vocabulary.MFU] / r[vocabulary.TOKENS_PER_S] for r in ranks[0]["reports"]]
    plain_rate = reports[0][vocabulary.MFU] / reports[0][vocabulary.TOKENS_PER_S]
    assert per_rate == pytest.approx([plain_rate / 2] * len(per_rate), rel=1e-9)
    # the trial spans both processes and holds no GPU on CPU
    assert {(r[vocabulary.WORKERS], r[vocabulary.GPUS]) for r in ranks[0]["reports"]} == {(2, 0)}
    # both ranks report the same numbers (they take the same branches)
    assert curve(ranks[0]["reports"]) == curve(ranks[1]["reports"])
    # the loss fell: the comparison is between trainings, not two copies of the start
    assert reports[-1][vocabulary.VAL_LOSS] < reports[0][vocabulary.VAL_LOSS] - 0.1


def merge(folders: list[Path], into: Path) -> Path:
    """Every rank's files in one folder, as Ray Train merges what each worker reports; no
    file name may come from two ranks."""
    into.mkdir()
    for folder in folders:
        for path in folder.iterdir():
            assert not (into / path.name).exists(), path.name
            shutil.copy2(path, into / path.name)
    return into


def shard_files(folder: Path) -> dict[str, set[str]]:
    """For each saved tensor (DCP's flattened name), the files holding its chunks."""
    metadata = FileSystemReader(str(folder)).read_metadata()
    files: dict[str, set[str]] = {}
    for index, info in metadata.storage_data.items():
        files.setdefault(index.fqn, set()).add(info.relative_path)
    return files


@pytest.mark.slow
def test_each_rank_saves_its_own_shards_and_their_merge_resumes_the_trial(spec, plain, tmp_path):
    """Two ranks save into their own directories (as on two nodes) while every gather of a
    DTensor raises; the two directories copied into one folder resume the trial in a fresh
    2-rank group to the uninterrupted run's losses, and in one plain process too."""
    reports, _ = plain
    common = {"spec": spec, "shape": SHAPE, "seed": 0, "no_gather": True}
    nodes = [tmp_path / "node0", tmp_path / "node1"]
    [first] = run_sharded_jobs(
        tmp_path / "first",
        2,
        [{**common, "checkpoint_dir": str(tmp_path / "node{rank}"), "stop_at": 10}],
    )
    assert all(rank.get("interrupted") and rank["gathers"] == 0 for rank in first), first
    # every rank reports its own directory at every evaluation
    assert [rank["checkpoints"] for rank in first] == [[str(n)] * 2 for n in nodes]
    assert sorted(p.name for p in nodes[0].iterdir()) == [
        ".metadata",
        "__0_0.distcp",
        TRAINER_FILE,
    ]
    assert sorted(p.name for p in nodes[1].iterdir()) == ["__1_0.distcp"]
    # each rank wrote its own half of every model and optimizer tensor: nothing was gathered
    files = shard_files(nodes[0])
    weights = [name for name in files if name.startswith("model.")]
    moments = [name for name in files if name.endswith((".exp_avg", ".exp_avg_sq"))]
    assert len(weights) == len(moments) / 2 > 0
    assert all(files[n] == {"__0_0.distcp", "__1_0.distcp"} for n in weights + moments)

    merged = merge(nodes, tmp_path / "merged")
    incomplete = merge(nodes[:1], tmp_path / "incomplete")
    missing, resumed = run_sharded_jobs(
        tmp_path / "second",
        2,
        [
            {**common, "resume_from": str(incomplete)},
            {**common, "resume_from": str(merged), "checkpoint_dir": str(tmp_path / "n{rank}")},
        ],
    )
    for rank in missing:  # a rank's file is missing: one line that says so, on every rank
        assert rank["error"].startswith(f"resume_from: {incomplete} is not a complete sharded")
        assert "\n" not in rank["error"]
    assert all(rank["gathers"] == 0 and "error" not in rank for rank in resumed), resumed
    assert [r[vocabulary.STEP] for r in resumed[0]["reports"]] == [15, 20]
    assert_close(curve(first[0]["reports"] + resumed[0]["reports"]), curve(reports))
    assert curve(resumed[0]["reports"]) == curve(resumed[1]["reports"])
    # the same folder resumes in one plain process: the shards load over any number of ranks
    tail: list[dict] = []
    train_model(spec, SHAPE, 0, lambda m, _c: tail.append(m), resume_from=str(merged))
    assert_close(curve(first[0]["reports"] + tail), curve(reports))


def test_mixed_precision_only_on_gpus():
    """FSDP2 on CUDA: bf16 parameters, fp32 reduction (and no autocast); on CPU: none."""
    policy = mixed_precision(torch.device("cuda"))
    assert policy is not None
    assert (policy.param_dtype, policy.reduce_dtype) == (torch.bfloat16, torch.float32)
    assert mixed_precision(torch.device("cpu")) is None


def test_a_batch_the_workers_cannot_split_evenly_is_refused():
    check_divides(8, 2)
    with pytest.raises(InputError, match=r"^train.batch_size: got 3; .* divisible by 2$"):
        check_divides(3, 2)
