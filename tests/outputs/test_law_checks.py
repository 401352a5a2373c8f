"""The report's law-checks section, drawn from the record the fit stage stores in fit.json."""

from __future__ import annotations

import re

import numpy as np

from dwtune.core.fit.checks import law_checks
from dwtune.outputs.report import law_checks as section
from dwtune.storage.fit_json import json_ready
from tests.helpers.paired_deltas import observations_of, paired_study


def test_the_section_holds_forms_loo_and_the_bootstrap():
    pairs = paired_study(np.random.default_rng(2))
    record = json_ready(law_checks(observations_of(pairs), pairs, [1e13], replicates=100))
    text = "\n".join(section.markdown(record))
    assert "LR test, quadratic vs linear" in text and "without" not in text
    assert "| pair left out |" in text and "Study bootstrap (" in text
    # report.md is read by people: it names methods, never the functions that run them
    assert re.findall(r"dwtune\.\w+\.|\b[a-z]+_[a-z]+_?[a-z]*\b(?![.\]])", text) == []


def test_without_pair_deltas_the_section_says_why():
    pairs = paired_study(np.random.default_rng(3))
    missing = "no pair_deltas.parquet (rerun the refine stage)"
    record = json_ready(law_checks(observations_of(pairs), None, missing=missing))
    assert "Study bootstrap: not run (no pair_deltas.parquet" in "\n".join(section.markdown(record))


def test_pairs_stopped_on_their_round_cap_with_a_wide_bracket_are_named():
    assert section.markdown(None, ())[-2:] == ["No fit, so nothing to check.", ""]
    text = "\n".join(section.markdown(None, ["24-30"]))
    assert "Stopped on the round cap with a wide bracket: 24-30." in text
    assert "95% intervals span the bracket" in text


def test_a_kinked_bracket_is_named_in_the_law_checks_with_or_without_a_fit():
    assert not any("Kinked" in line for line in section.markdown(None, (), ()))
    assert "Kinked bracket: 12-18." in "\n".join(section.markdown(None, (), ["12-18"]))


def test_the_section_names_the_preferred_competing_law():
    from dwtune.storage.fit_json import competing_laws_dict

    pairs = paired_study(np.random.default_rng(2))
    observations = observations_of(pairs)
    record = json_ready(law_checks(observations, None, missing="none"))
    text = "\n".join(section.markdown(record, competing=competing_laws_dict(observations)))
    assert "| law | form | k | log L | AIC | AICc | LOO rms ln N\\* |" in text
    assert "Competing laws (docs/method.md): preferred law: " in text
    assert "| separable | loss = A/dx + B/L + E" in text


def test_the_report_reads_capped_and_kinked_pairs_from_their_columns_or_older_statements():
    from types import SimpleNamespace

    import pandas as pd

    from dwtune.core.refine.transition import CAPPED_SENTENCE, KINKED_SENTENCE
    from dwtune.outputs.report.markdown import _pairs_flagged

    now = pd.DataFrame(
        {"pair": ["1-2", "2-3", "3-4"], "statement": ["", "", ""],
         "capped_wide": [False, True, False], "kinked": [True, False, False]}
    )  # fmt: skip
    written_now = SimpleNamespace(transitions=now)
    assert _pairs_flagged(written_now, "capped_wide", CAPPED_SENTENCE) == ["2-3"]
    assert _pairs_flagged(written_now, "kinked", KINKED_SENTENCE) == ["1-2"]
    # a file from before the columns: the facts live only in the statement's closing sentence
    before = pd.DataFrame(
        {"pair": ["1-2", "2-3"], "statement": [f"N* = 1e6. {KINKED_SENTENCE}", CAPPED_SENTENCE]}
    )
    written_before = SimpleNamespace(transitions=before)
    assert _pairs_flagged(written_before, "capped_wide", CAPPED_SENTENCE) == ["2-3"]
    assert _pairs_flagged(written_before, "kinked", KINKED_SENTENCE) == ["1-2"]
    assert _pairs_flagged(SimpleNamespace(transitions=None), "kinked", KINKED_SENTENCE) == []
