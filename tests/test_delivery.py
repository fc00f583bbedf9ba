"""The parent's copies of a repeat's outputs (rule ``settled``) and the stacked batches it checks."""

from __future__ import annotations

import pytest
import torch

from evaluator.delivery import joined, snapshot, snapshot_all


def _outputs(count: int, batch: int = 3, n: int = 4) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(torch.randn(batch, n, n), torch.randn(batch, n)) for _ in range(count)]


def _shares_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def test_a_repeats_copies_equal_its_outputs_and_stay_as_they_were_taken() -> None:
    outputs = _outputs(5)
    copies = snapshot_all(outputs)
    assert all(torch.equal(v, c) for output, copy in zip(outputs, copies, strict=True)
               for v, c in zip(output, copy, strict=True))
    outputs[2][0].add_(1.0)  # a write after the report shows as a difference from the copy
    outputs[4][1].zero_()
    assert not torch.equal(outputs[2][0], copies[2][0])
    assert not torch.equal(outputs[4][1], copies[4][1])
    assert torch.equal(copies[0][0], outputs[0][0])


def test_stacked_copies_come_back_joined_without_a_copy() -> None:
    outputs = _outputs(4)
    copies = snapshot_all(outputs)
    h = joined([c[0] for c in copies])
    tau = joined([c[1] for c in copies])
    assert torch.equal(h, torch.cat([o[0] for o in outputs]))
    assert torch.equal(tau, torch.cat([o[1] for o in outputs]))
    assert _shares_memory(h, copies[0][0])
    assert _shares_memory(tau, copies[0][0])
    flat = joined([t.reshape(-1) for t in [c[0] for c in copies] + [c[1] for c in copies]])
    assert flat.shape == (sum(o[0].numel() + o[1].numel() for o in outputs),)
    assert _shares_memory(flat, copies[0][0])


def test_a_batch_made_at_once_and_chunked_is_joined_as_it_lies() -> None:
    whole = torch.randn(10, 4, 4)
    chunks = list(whole.chunk(5))
    assert joined(chunks).data_ptr() == whole.data_ptr()
    assert torch.equal(joined(chunks[1:3]), torch.cat(chunks[1:3]))
    assert joined(chunks[1:3]).data_ptr() == chunks[1].data_ptr()


@pytest.mark.parametrize("parts", [
    lambda c: [c[1], c[0]],  # out of order
    lambda c: [c[0], c[2]],  # a gap
    lambda c: [c[0], torch.randn(2, 4, 4)],  # another tensor's memory
    lambda c: [c[0][:, :, :2], c[1][:, :, :2]],  # not contiguous
])
def test_parts_that_do_not_lie_back_to_back_are_concatenated(parts) -> None:
    chosen = parts(list(torch.randn(10, 4, 4).chunk(5)))
    together = joined(chosen)
    assert torch.equal(together, torch.cat(chosen))
    assert not any(_shares_memory(together, p) for p in chosen)


@pytest.mark.parametrize("outputs", [
    [(torch.randn(2, 3, 3), torch.randn(2, 3, dtype=torch.float64))] * 2,  # H and tau of two dtypes
    [(torch.randn(2, 3, 3), torch.randn(2, 3)), (torch.randn(2, 4, 4), torch.randn(2, 4))],  # two sizes
    [(torch.randn(2, 3, 3), torch.randn(2, 3)), [torch.randn(2, 3, 3)]],  # not a tuple
    [(torch.randn(2, 3, 3), torch.randn(2, 3)), (torch.zeros(()).expand(2, 3, 3), torch.zeros(2, 3, device="meta"))],
    [(torch.randn(2, 3, 3), torch.randn(2, 3))],  # one output
])
def test_outputs_that_do_not_stack_are_copied_one_by_one(outputs) -> None:
    copies = snapshot_all(outputs)
    assert len(copies) == len(outputs)
    for output, copy in zip(outputs, copies, strict=True):
        expected = snapshot(output)
        assert type(copy) is type(expected)
        if isinstance(output, tuple):
            assert all(torch.equal(v, c) for v, c in zip(output, copy, strict=True) if v.device.type != "meta")
            assert all(not _shares_memory(v, c) for v, c in zip(output, copy, strict=True) if v.device.type != "meta")
