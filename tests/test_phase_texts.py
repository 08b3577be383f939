"""The phase notebook's paragraphs come from study functions: each states the numbers it was given."""

from __future__ import annotations

from heavytail.studies import claims as C
from heavytail.studies.phase import confirm, diagram, fixed_weight


def _cell(kernel, a, predicted, low, high):
    return {"kernel": kernel, "a": a, "predicted": predicted, "measured": (low + high) / 2, "joint_low": low,
            "joint_high": high}


def test_the_static_verdict_paragraph_counts_and_names_the_cells_it_read():
    rows = [_cell("log_elu", 2.5, 0.40, 0.35, 0.45), _cell("softmax", 1.5, 0.67, 0.80, 0.90),
            _cell("linear_elu", 3.0, 0.33, 0.20, 0.40)]
    text = diagram.static_verdict_text(rows)
    assert text.startswith(f"**The static verdict: {C.NOT_REPRODUCED}.** Of 3 cells, 1 have intervals within +-0.1")
    assert "1 straddle its edge and 1 lie wholly outside it" in text
    assert "Outside: softmax at a = 1.5 (predicted 0.67, measured 0.85 [0.80, 0.90])" in text
    assert "Straddling: linear_elu at a = 3" in text and "half-widths 0.050 to 0.100" in text


def _fixed(measured, hill1):
    at = {"a": 2.5, "predicted": 0.4, "measured": measured, "low": measured - 0.05, "high": measured + 0.05,
          "hill": [{"block": 0, "median": 2.4, "band_low": 2.2, "band_high": 2.6},
                   {"block": 1, "median": hill1, "band_low": hill1 - 1, "band_high": hill1 + 1}]}
    return {"kernel": "log_elu", "tail_regime": "paper", "n_points": 1024, "ns": [256, 4096], "reps": 8,
            "hill_n": 4096, "at": [at]}


def test_the_fixed_weight_table_and_paragraph_state_each_case():
    shipped = {"runs": [_fixed(0.45, 9.0), _fixed(0.7, 12.0)]}
    assert fixed_weight.within(shipped, 0.1) == (1, 2)
    table = fixed_weight.table(shipped)
    assert len(table["rows"]) == 2 and table["rows"][1]["block 0 exponent (95 %)"] == "0.700 (0.650 - 0.750)"
    text = fixed_weight.summary(shipped, 0.1)
    assert "in 1 of 2 (run, a) cases" in text and "Hill estimates of 9 to 12" in text


def test_the_confirmatory_status_without_a_map_says_so():
    clause, paragraph = confirm.status(None)
    assert clause == "the confirmatory map is not shipped yet" and paragraph == f"**Confirmatory map:** {clause}."


def test_the_cross_check_paragraph_counts_agreeing_cells_or_says_why_none_compared():
    from heavytail.studies.phase import static

    assert "3 of 4 shared cells" in static.cross_check_text({"agree": False, "shared": 4, "misses": 1}, [1.5], [1.5])
    none = static.cross_check_text({"agree": None, "shared": 0, "misses": 0}, [1.75], [2.0, 3.0])
    assert "not made" in none and "[1.75]" in none and "[2.0, 3.0]" in none


def test_the_power_and_scope_paragraphs_read_the_maps_cells():
    rows = [{"kernel": k, "regime": g, "predicted": "grows" if k == "softmax" else "bounded", "seeds": 5,
             "slopes": [0.0, 0.1, -0.1, 0.05, -0.05]} for k in ("softmax", "log_elu") for g in ("paper", "moderate")]
    assert abs(diagram.slope_spread(rows) - 0.0790569) < 1e-6
    text = diagram.power_text(rows, seeds=(5,), m=20)
    assert "slope spread (0.079" in text and "of maps at 5 seeds (20 simulated maps each)" in text
    assert diagram.power_text([dict(r, slopes=[0.1]) for r in rows]) == ""
    assert "at 5 seeds per cell" in diagram.scope_text(rows)
