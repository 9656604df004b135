"""DAPO Eq. 13 at every boundary, and overlong filtering."""
import pytest
import torch

from gpolib.rewards import overlong_filter_mask, soft_overlong_penalty


@pytest.mark.parametrize("length,expected", [
    (0, 0.0), (80, 0.0), (81, -1 / 16), (88, -0.5), (95, -15 / 16), (96, -1.0), (97, -1.0), (500, -1.0)])
def test_soft_overlong_penalty_boundaries(length, expected):
    assert soft_overlong_penalty(length, 96, 16) == pytest.approx(expected)


def test_soft_overlong_penalty_tensor():
    out = soft_overlong_penalty(torch.tensor([10, 88, 200]), 96, 16)
    assert torch.allclose(out, torch.tensor([0.0, -0.5, -1.0]))
    with pytest.raises(ValueError, match="cache_len"):
        soft_overlong_penalty(10, 96, 0)


def test_overlong_filter_masks_truncated():
    mask = torch.ones(3, 4)
    out = overlong_filter_mask(mask, torch.tensor([False, True, False]))
    assert out.sum(1).tolist() == [4.0, 0.0, 4.0]
