"""benchmarks/scripts/snapavg_screen.py: the protocol's rules for SNAPAVG and T-POOL
(benchmarks/PROTOCOL.md, "Candidates SNAPAVG and T-POOL"), on hand-made cases."""
import pytest


def with_grid(pick, avg=None) -> dict:
    """ECE of pick and avg at each temperature of the grid (avg: the pick's where not given)."""
    temperatures = ("1.5", "2.0", "2.5", "3.0", "3.5")
    return {"ece_at_temperature": {"pick": dict(zip(temperatures, pick)), "avg": dict(zip(temperatures, avg or pick))}}


def make_case(pick_gain, pick_low, avg_gain, avg_low, pick_ece, avg_ece, f1=(60.0, 60.0)) -> dict:
    return {
        "pick_vs_teacher": {"difference": pick_gain, "difference_95ci": [pick_low, pick_gain + 2]},
        "avg_vs_teacher": {"difference": avg_gain, "difference_95ci": [avg_low, avg_gain + 2]},
        **with_grid([pick_ece] * 5, [avg_ece] * 5),
        "f1": {"pick": f1[0], "avg": f1[1]},
    }


def cases(fi_avg_ece=0.08, es_avg_f1=70.0, fi_avg_low=-1.0, fi_avg_gain=1.5) -> dict:
    return {
        "fi/a": make_case(1.0, -1.5, fi_avg_gain, fi_avg_low, 0.08, fi_avg_ece),
        "fi/b": make_case(0.5, -1.0, 0.5, -0.8, 0.09, 0.09),
        "es/a": make_case(4.0, 3.0, 4.0, 3.0, 0.05, 0.05, f1=(70.0, es_avg_f1)),
        "es/b": make_case(4.0, 3.0, 4.0, 3.0, 0.05, 0.05, f1=(71.0, 71.0)),
    }


def test_snapavg_adopted_when_every_condition_holds(snapavg_screen) -> None:
    rule = snapavg_screen.snapavg_rule(cases())
    assert rule["figures"]["fi_mean_gain"] == {"avg": 1.0, "pick": 0.75}
    assert rule["figures"]["fi_lowest_bound"] == {"avg": -1.0, "pick": -1.5}
    assert rule["adopted"]


@pytest.mark.parametrize("kwargs, failed", [
    ({"fi_avg_gain": 0.9}, "i"),       # mean gain 0.70 < the pick's 0.75
    ({"fi_avg_ece": 0.0911}, "iii"),  # mean ECE 0.09055 > 0.085 + 0.005
    ({"fi_avg_ece": 0.0902}, "iii"),  # 0.0901 > 0.090: judged before any rounding
    ({"es_avg_f1": 68.9}, "iv"),      # Spanish mean 0.55 below the pick's
    ({"fi_avg_low": -1.6}, "ii"),     # the lowest bound below the pick's -1.5
])
def test_snapavg_refused_on_one_condition(snapavg_screen, kwargs, failed) -> None:
    rule = snapavg_screen.snapavg_rule(cases(**kwargs))
    assert [k for k, ok in rule["met"].items() if not ok] == [failed]
    assert not rule["adopted"]


def test_snapavg_within_the_tolerances(snapavg_screen) -> None:
    rule = snapavg_screen.snapavg_rule(cases(fi_avg_ece=0.089, es_avg_f1=69.1))  # ECE +0.0045, F1 -0.45
    assert rule["adopted"]


def test_tpool_takes_the_lowest_mean_and_needs_a_margin(snapavg_screen) -> None:
    rule = snapavg_screen.tpool_rule({"fi/x": with_grid([0.10, 0.08, 0.065, 0.07, 0.09])}, False)
    assert rule["best"] == 2.5 and rule["adopted"]
    rule = snapavg_screen.tpool_rule({"fi/x": with_grid([0.10, 0.08, 0.072, 0.0715, 0.09])}, False)  # only 0.0085 lower
    assert rule["best"] == 3.0 and not rule["adopted"]


def test_tpool_reads_what_would_ship(snapavg_screen) -> None:
    """SNAPAVG adopted: the Finnish mean counts, the Spanish pick (DEVSEL stays) counts."""
    grid = {"fi/x": with_grid([0.2] * 5, avg=[0.10, 0.08, 0.05, 0.09, 0.09]),
            "es/x": with_grid([0.10, 0.06, 0.05, 0.09, 0.09], avg=[0.3] * 5)}
    rule = snapavg_screen.tpool_rule(grid, True)
    assert rule["model"] == {"fi/x": "avg", "es/x": "pick"}
    assert rule["mean_ece"]["2.5"] == 0.05 and rule["best"] == 2.5 and rule["adopted"]
    assert snapavg_screen.tpool_rule(grid, False)["mean_ece"]["2.5"] == 0.125
