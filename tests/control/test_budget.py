"""The watermark budget (``millstream.control.budget``) and a container's combined rounds under it
(``millstream.control.combining``): a wide stream's rounds cost at most a share of its user records plus a floor,
wait at most the maximum delay, and narrow streams, end-of-stream and restored re-reports are never held back."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from millstream.control.budget import BudgetSettings, WatermarkBudget
from millstream.control.combining import WatermarkCombiner
from millstream.control.framing import MessageType
from millstream.control.protocol import ControlProtocol, ControlSend, ProducedStream, ProtocolSettings
from millstream.model import SystemStream
from tests.control.test_reconciliation import FakeClock

OUT = SystemStream("log", "app-1-by-user")
BUDGET = BudgetSettings(share=0.005, floor_records=8, max_delay_ms=2000, interval_ms=200)
TICK = 0.2


def budgeted(clock: FakeClock, partitions: int, budget: BudgetSettings | None = BUDGET, boundary_ms: int = 0):
    combiner = WatermarkCombiner(200, boundary_ms, clock, budget=budget)
    combiner.join("t0", [ProducedStream(OUT, partitions, 1)])
    return combiner


def drive(combiner: WatermarkCombiner, clock: FakeClock, seconds: float, rate: float, step_ms: int = 1000):
    """Event time moves ``step_ms`` per tick (200 ms) and the task writes ``rate`` user records a second: the
    times at which rounds went out and the records they wrote."""
    times: list[float] = []
    records = 0
    watermark = 0
    for _ in range(round(seconds / TICK)):
        clock.now += TICK
        combiner.wrote(OUT, round(rate * TICK))
        sends = combiner.due()
        watermark += step_ms
        sends += combiner.report("t0", OUT, watermark)
        if sends:
            times.append(clock.now)
            records += len(sends)
    return times, records


@pytest.mark.parametrize("rate", [0, 1_000_000], ids=["idle", "fast"])
@pytest.mark.parametrize("partitions", [4, 8])
def test_a_narrow_stream_keeps_one_round_per_interval_at_any_rate_exactly_as_without_a_budget(rate, partitions):
    with_budget, without = FakeClock(), FakeClock()
    times, _ = drive(budgeted(with_budget, partitions), with_budget, 20, rate)
    assert times == drive(budgeted(without, partitions, None), without, 20, rate)[0]
    assert len(times) == 100, "one round per 200 ms tick"


def test_a_wide_stream_at_a_high_rate_spends_at_most_its_share_plus_the_floor():
    clock = FakeClock()
    combiner = budgeted(clock, 128)
    seconds, rate = 60, 20_000
    times, records = drive(combiner, clock, seconds, rate)
    share, floor = 0.005 * rate * seconds, 8 * seconds / 0.2
    assert records <= share + floor + 128, (records, share, floor)
    assert records >= 0.9 * (share + floor), "the budget is spent, not hoarded"
    assert combiner.budget.forced == 0
    assert max(b - a for a, b in itertools.pairwise(times)) <= 1.0 + 1e-6, "128 records at 140 a second"


def test_a_wide_stream_at_a_low_rate_advances_at_least_every_maximum_delay():
    clock = FakeClock()
    combiner = budgeted(clock, 128)
    times, records = drive(combiner, clock, 60, 0)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert gaps and max(gaps) <= 2.0 + 2 * TICK + 1e-6, gaps
    assert min(gaps) >= 2.0 - 1e-6, "paid by the floor alone no round comes sooner: 128 records at 8 per interval"
    assert combiner.budget.forced >= len(times) - 2, "rounds past the maximum delay go out unpaid"
    assert records == 128 * len(times)


def test_window_boundary_rounds_pay_like_any_other():
    """Event time passes a window boundary at every tick, which the pacer alone would let out every tick."""
    clock, unbudgeted_clock = FakeClock(), FakeClock()
    _, records = drive(budgeted(clock, 128, boundary_ms=1000), clock, 30, 20_000)
    _, unbudgeted = drive(budgeted(unbudgeted_clock, 128, None, 1000), unbudgeted_clock, 30, 20_000)
    assert unbudgeted >= 128 * 140, "the pacer's bucket of two lets a boundary out at every tick"
    assert records <= 0.005 * 20_000 * 30 + 8 * 30 / 0.2 + 128


def test_a_disabled_budget_changes_nothing():
    for disabled in (
        BudgetSettings(share=0, interval_ms=200),
        BudgetSettings(share=0.005, max_delay_ms=0),
        BudgetSettings(share=0.005, interval_ms=0),
    ):
        budget: WatermarkBudget[str] = WatermarkBudget(disabled)
        assert all(budget.affords("s", 10_000, float(now)) for now in range(5))


def test_invalid_budgets_are_refused_naming_the_value():
    with pytest.raises(ValueError, match=r"share .* 1\.5"):
        BudgetSettings(share=1.5)
    with pytest.raises(ValueError, match="negative"):
        BudgetSettings(floor_records=-1)


def protocol(clock: FakeClock, combiner: WatermarkCombiner) -> ControlProtocol:
    return ControlProtocol(
        "t0",
        frozenset(),
        produced=[ProducedStream(OUT, 128, 1)],
        settings=ProtocolSettings(watermark_interval_ms=200),
        clock=clock,
        combiner=combiner,
    )


def test_end_of_stream_and_a_restored_re_report_are_not_held_back_by_an_empty_budget():
    clock = FakeClock()
    combiner = WatermarkCombiner(200, 0, clock, budget=BUDGET)
    task = protocol(clock, combiner)
    assert len(task.on_output_watermark(OUT, 1000).sends) == 128, "the bucket starts with one round"
    clock.now += 1.0
    assert not task.on_output_watermark(OUT, 2000).sends, "held: the floor paid 40 records of 128"
    snapshot = task.snapshot()
    end = task.on_output_end_of_stream(OUT)
    assert end.flush and [send.frame[0] for send in task.deferred] == [MessageType.END_OF_STREAM]

    restarted_clock = FakeClock()
    restarted = WatermarkCombiner(200, 0, restarted_clock, budget=BUDGET)
    again = protocol(restarted_clock, restarted)
    restarted.budget.affords(OUT, 128, restarted_clock.now)
    restarted.budget.spent(OUT, 128, restarted_clock.now)  # another restored task took the bucket's round
    again.restore(snapshot)
    assert len(again.resume().sends) == 128, "the task's newest watermark goes out at once after a restart"


STEPS = st.lists(
    st.tuples(
        st.floats(min_value=0.001, max_value=0.3),  # time to the next timer call
        st.integers(min_value=0, max_value=400),  # user records written meanwhile
        st.integers(min_value=0, max_value=3_000),  # how far the task's watermark moves
    ),
    min_size=1,
    max_size=200,
)


@settings(max_examples=200, deadline=None)
@given(STEPS, st.sampled_from([0, 1000]), st.sampled_from([16, 64]))
def test_rounds_cost_at_most_the_share_the_floor_and_a_round_and_no_due_watermark_waits_past_the_maximum_delay(
    steps, boundary_ms, partitions
):
    share, floor, max_delay, interval = 0.01, 4, 1.0, 0.2
    clock = FakeClock()
    combiner = budgeted(clock, partitions, BudgetSettings(share, floor, round(max_delay * 1000), 200), boundary_ms)
    start, written, records, watermark = clock.now, 0, 0, 0
    unsent_since: float | None = None
    for pause, user, advance in steps:
        clock.now += pause
        combiner.wrote(OUT, user)
        written += user
        sent: tuple[ControlSend, ...] = combiner.due()
        if advance:
            watermark += advance
            sent += combiner.report("t0", OUT, watermark)
        records += len(sent)
        if sent:
            unsent_since = None
        elif advance and unsent_since is None:
            unsent_since = clock.now
        forced = combiner.budget.forced
        bound = share * written + floor * (clock.now - start) / interval + partitions * (1 + forced)
        assert records <= bound + 1e-6, (records, bound)
        assert forced <= 1 + (clock.now - start) / max_delay
        if unsent_since is not None:
            # the pacer's full bucket (two sends, less the jitter), the budget's maximum delay, a timer call each
            assert clock.now - unsent_since <= 2 * interval + max_delay + 2 * 0.3 + 1e-6
