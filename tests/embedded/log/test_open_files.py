"""The log's pools default to shares of the hard open-file limit, so a container with room to spare keeps its busy
partitions open instead of reopening them at every poll and commit, and a low limit still fits."""

from __future__ import annotations

import resource

from millstream.embedded.log.open_files import (
    ADMIN_DEFAULT,
    AUTO_MAX,
    AUTO_MIN,
    DESCRIPTORS_PER_PARTITION,
    SHARE,
    SPARE,
    PoolBounds,
    pool_bounds,
)
from millstream.runtime.file_limit import HEADROOM


def test_unset_pools_share_what_the_hard_limit_leaves_and_fit_under_it() -> None:
    for hard in (1_024, 4_096, 20_000, 65_536):
        bounds = pool_bounds(None, None, None, hard_limit=hard)
        assert bounds.consumer == bounds.producer >= AUTO_MIN
        assert bounds.descriptors + HEADROOM <= hard, (
            f"the defaults under a hard limit of {hard} fail the start's check"
        )
        assert bounds.descriptors <= max(hard * SHARE - SPARE, (1 + 2 * AUTO_MIN) * DESCRIPTORS_PER_PARTITION), hard
    assert pool_bounds(None, None, None, hard_limit=20_000) == PoolBounds(ADMIN_DEFAULT, 1_058, 1_058)
    assert pool_bounds(None, None, None, hard_limit=1_024).admin < ADMIN_DEFAULT  # a low limit shrinks the admin's


def test_a_generous_or_unlimited_hard_limit_caps_each_pool() -> None:
    for hard in (10_000_000, resource.RLIM_INFINITY):
        assert pool_bounds(None, None, None, hard_limit=hard) == PoolBounds(ADMIN_DEFAULT, AUTO_MAX, AUTO_MAX)


def test_keys_set_in_the_config_win_over_the_shares() -> None:
    assert pool_bounds(0, 7, 9, hard_limit=20_000) == PoolBounds(0, 7, 9)
    assert pool_bounds(None, 7, None, hard_limit=20_000).producer == 1_058
