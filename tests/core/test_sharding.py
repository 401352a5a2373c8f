"""Trials over several workers: the spec's rules, the per-worker memory and the per-cell
choice (core.sharding). `dwtune plan`'s workers column: tests/commands/test_plan.py."""

from __future__ import annotations

import pytest

from dwtune.core import memory
from dwtune.core.budget import ModelShape, count_params
from dwtune.core.errors import InputError
from dwtune.core.sharding import (
    sharded_concurrency,
    trial_layout,
    trial_workers,
    worker_memory,
    worker_split,
)
from dwtune.core.spec import spec_from_dict
from tests.helpers.specs import small_simulated

GiB = 2**30


def torch_spec(**resources) -> object:
    return spec_from_dict(small_simulated(trainer="torch", resources=resources))


@pytest.mark.parametrize(
    ("resources", "train", "message"),
    [
        ({"workers_per_trial": 0}, {}, r"^resources.workers_per_trial: got 0; expected a value"),
        (
            {"workers_per_trial": 2, "gpu": 0.5},
            {},
            r"^resources.gpu: got 0.5 with workers_per_trial 2; .* use gpu 1 \(or 0 on CPU\)$",
        ),
        (
            {"workers_per_trial": 2, "gpu": 2},
            {},
            r"^resources.gpu: got 2 with workers_per_trial 2;",
        ),
        (
            {"workers_per_trial": 3},
            {"batch_size": 8},
            r"^train.batch_size: got 8; .*workers_per_trial = 3 workers needs a batch size "
            r"divisible by 3$",
        ),
    ],
)
def test_bad_sharding_settings_are_refused_in_one_line(resources, train, message):
    raw = small_simulated(trainer="torch", resources=resources, train=train)
    with pytest.raises(InputError, match=message) as caught:
        spec_from_dict(raw)
    assert "\n" not in str(caught.value)


def test_only_the_torch_trainer_shards():
    with pytest.raises(InputError, match=r"^resources.workers_per_trial: got 2; only the torch"):
        spec_from_dict(small_simulated(resources={"workers_per_trial": 2}))


def test_a_worker_holds_its_share_of_the_state_and_of_the_batch():
    shape = ModelShape(depth=4, width=256, heads=2, vocab_size=2000, seq_len=128)
    whole = memory.trial_memory(shape, 16)
    assert memory.sharded_memory(shape, 16, 1) == whole
    quarter = memory.sharded_memory(shape, 16, 4)
    params = count_params(shape)
    block, root = params.blocks // shape.depth, params.total - params.blocks
    # its quarter of the fp32 weights, gradients and AdamW moments, nothing more of the model
    assert quarter.weights_and_optimizer == -(-16 * params.total // 4)
    # fp32 on CPU: two blocks' parameters (running, prefetched) and the root's, one block's
    # gradient, two blocks' fp32 reduce-scatter inputs
    assert quarter.gathered == 4 * (2 * block + root) + 4 * block + 2 * 4 * block
    assert quarter.activations == memory.trial_memory(shape, 4).activations
    assert quarter.total == sum(
        (quarter.weights_and_optimizer, quarter.gathered, quarter.activations, quarter.logits)
    )
    assert quarter.total < whole.total / 2


def test_on_cpu_every_cell_uses_every_worker_and_one_process_stays_one():
    spec = torch_spec(workers_per_trial=2, cpu=1)
    cell = spec.grid()[0]
    assert trial_workers(spec, cell.shape, None) == 2
    assert trial_workers(spec, cell.shape, 80 * GiB) == 2  # no GPUs: the spec's number
    assert trial_workers(torch_spec(), cell.shape, None) == 1


def test_on_gpus_of_known_memory_a_cell_spans_the_fewest_workers_that_hold_it():
    spec = torch_spec(workers_per_trial=8, gpu=1)
    small, large = spec.grid()[0], spec.grid()[-1]
    need_small = worker_memory(spec, small.shape, 1)
    roomy = int(need_small / (1 - memory.GPU_RESERVE_FRACTION)) + 1
    assert trial_workers(spec, small.shape, roomy) == 1
    # a GPU that holds half the large trial, but not all of it
    two = worker_memory(spec, large.shape, 2)
    gpu = int(two / (1 - memory.GPU_RESERVE_FRACTION)) + 1
    assert worker_memory(spec, large.shape, 1) > gpu * (1 - memory.GPU_RESERVE_FRACTION)
    assert trial_workers(spec, large.shape, gpu) == 2
    # nothing holds it: all 8 (the plan's packing check then says it does not fit)
    assert trial_workers(spec, large.shape, 1) == 8
    # unknown GPU memory: all of them
    assert trial_workers(spec, large.shape, None) == 8


def test_as_many_sharded_jobs_run_at_once_as_the_cluster_holds():
    assert sharded_concurrency({"CPU": 2.0}, 0.5, 0, 2) == 2
    assert sharded_concurrency({"CPU": 64.0, "GPU": 16.0}, 8, 1, 8) == 1  # CPUs bind
    assert sharded_concurrency({"CPU": 256.0, "GPU": 16.0}, 8, 1, 4) == 4  # GPUs bind
    assert sharded_concurrency({"CPU": 1.0}, 1, 0, 4) == 1  # waits for the autoscaler


def paper_cells(train: dict | None = None, **resources) -> tuple[object, dict]:
    """A spec at the paper's batch (512 x 128 tokens, BPE-2000) on 80 GiB GPUs, depth 48 at a
    budget one GPU holds (1e9) and one whose AdamW state alone exceeds it (1e10)."""
    raw = {
        "name": "paperlike",
        "trainer": "torch",
        "data": {"tokenizer": "bpe", "vocab_size": 2000, "seq_len": 128},
        "model": {"width_multiple": 16},
        "space": {"depths": [48], "budgets": [1e9, 1e10]},
        "train": {"steps": 10, "batch_size": 512, **(train or {})},
        "resources": {"gpu": 1, "workers_per_trial": 8, **resources},
    }
    spec = spec_from_dict(raw)
    return spec, {cell.budget: cell.shape for cell in spec.grid()}


def test_a_cell_one_gpu_holds_in_micro_batches_is_not_sharded():
    spec, shapes = paper_cells()
    layout = trial_layout(spec, shapes[1e9], 80 * GiB)
    assert layout.workers == 1 and layout.fits
    assert layout.split.accumulation > 1  # its whole batch does not fit: micro-batches do
    assert worker_memory(spec, shapes[1e9], 1) > memory.gpu_share_bytes(80 * GiB, 1)


def test_a_cell_beyond_one_gpu_spans_the_fewest_workers_each_in_micro_batches():
    spec, shapes = paper_cells()
    share = memory.gpu_share_bytes(80 * GiB, 1)
    layout = trial_layout(spec, shapes[1e10], 80 * GiB)
    assert layout.fits and layout.worker_bytes <= share
    # no fewer workers hold it at any micro-batch
    smaller = [n for n in (1, 2, 4) if n < layout.workers]
    assert smaller and not any(worker_split(spec, shapes[1e10], n, share).fits for n in smaller)
    # each worker splits its rows of the batch: in one pass they would not fit
    assert layout.split.batch_size == 512 // layout.workers
    assert layout.split.accumulation > 1
    assert worker_memory(spec, shapes[1e10], layout.workers) > share
    # the fewest passes that fit: one pass fewer needs a larger micro-batch, which does not
    fewer = -(-layout.split.batch_size // (layout.split.accumulation - 1))
    need = memory.worker_memory(shapes[1e10], fewer, layout.workers, 2).total
    assert need > share


def test_a_gpu_worker_gathers_bf16_blocks_and_keeps_no_copy_of_the_whole_model():
    """FSDP2's mixed-precision policy on GPUs: bf16 gathered blocks and fp32 reduce-scatter
    buffers; no bf16 autocast copy of the whole model (2·P), which a one-process trial under
    autocast does hold."""
    _, shapes = paper_cells()
    shape = shapes[1e10]
    fp32 = memory.worker_memory(shape, 8, 4, activation_bytes=4)
    bf16 = memory.worker_memory(shape, 8, 4, activation_bytes=2)
    params = count_params(shape)
    block, root = params.blocks // shape.depth, params.total - params.blocks
    assert bf16.weights_and_optimizer == fp32.weights_and_optimizer == -(-16 * params.total // 4)
    assert bf16.gathered == 2 * (2 * block + root) + 2 * block + 2 * 4 * block
    assert fp32.gathered - bf16.gathered == 2 * (2 * block + root) + 2 * block
    assert bf16.gathered < params.total  # a few blocks, not the model
    assert bf16.activations == memory.trial_memory(shape, 8, 2).activations
    one = memory.trial_memory(shape, 8, 2)  # one process under autocast: the bf16 copy
    assert one.weights_and_optimizer == 18 * params.total and one.gathered == 0


def test_checkpoints_stage_in_host_memory_only():
    """A sharded worker stages at most two of its largest shards plus DCP's copy-ahead window
    (its share shrinks with the workers); a one-process trial's load holds the whole saved
    state (fp32 weights, both moments) in host memory."""
    _, shapes = paper_cells()
    shape = shapes[1e10]
    params = count_params(shape).total
    assert memory.checkpoint_host_bytes(shape, 1) == 12 * params
    largest = 4 * shape.mlp_hidden * shape.width
    four = memory.checkpoint_host_bytes(shape, 4)
    assert four == 2 * -(-largest // 4) + memory.DCP_COPY_AHEAD_BYTES
    assert memory.checkpoint_host_bytes(shape, 8) < four < 12 * params / 100


def test_the_usable_memory_is_the_reported_one_capped_by_the_spec():
    reported = 85_520_809_984  # an H100 80GB HBM3's total_memory
    assert memory.usable_gpu_bytes(reported, None) == reported
    assert memory.usable_gpu_bytes(reported, 80) == reported  # 80 GiB: above what it has
    assert memory.usable_gpu_bytes(reported, 40) == 40 * GiB
    assert memory.usable_gpu_bytes(None, 80) == 80 * GiB
    assert memory.usable_gpu_bytes(None, None) is None


def test_the_specs_micro_batch_applies_to_each_workers_rows():
    spec, shapes = paper_cells(gpu=0, workers_per_trial=4)
    on_cpu = trial_layout(spec, shapes[1e9], None)  # CPU: all workers, no memory limit
    assert (on_cpu.workers, on_cpu.split.batch_size, on_cpu.split.accumulation) == (4, 128, 1)
    given, _ = paper_cells({"micro_batch_size": 48}, gpu=0, workers_per_trial=4)
    assert trial_layout(given, shapes[1e9], None).split.sizes() == [48, 48, 32]  # 128 rows
    whole, _ = paper_cells({"micro_batch_size": 512}, gpu=0, workers_per_trial=4)
    assert trial_layout(whole, shapes[1e9], None).split.sizes() == [128]  # at most the rows
