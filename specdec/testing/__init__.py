"""Public tools to prove a verifier lossless: exactly (plans, float64) and statistically (any verifier).

Typical use for your own :class:`~specdec.verify.plan.PlanVerifier`::

    from specdec.testing import VerifyCase, assert_lossless_exact, empirical_verify_check

    case = VerifyCase.from_functions(target_fn, vocab_size=4, parents=(-1, 0, 0, 1), sampling=params, tokens=...)
    assert_lossless_exact(MyVerifier(dtype=torch.float64), [case])      # exact, no sampling noise
    empirical_verify_check(MyVerifier(), case, n_samples=4000, seed=0)   # G-test through verify()

:mod:`specdec.testing.broken` holds deliberately wrong verifiers to confirm that a check can fail;
:func:`e2e_check` plants them in your pipeline and reports what it could have caught (:mod:`specdec.testing.power`).
"""

from specdec.testing.cases import VerifyCase, prefix_index
from specdec.testing.e2e import assert_e2e_lossless, e2e_check, exact_sequence_distribution
from specdec.testing.e2e_report import E2EReport
from specdec.testing.exact import (
    assert_lossless_exact,
    exact_output_distribution,
    expected_accepted,
    stop_probabilities,
    target_distribution,
)
from specdec.testing.pipeline import NotEnumerableError, PipelineLaw, pipeline_law
from specdec.testing.power import ControlResult, PowerReport, check_power
from specdec.testing.stats import assert_same_distribution, empirical_verify_check, g_test, sample_cycle_outputs

__all__ = [
    "ControlResult",
    "NotEnumerableError",
    "PipelineLaw",
    "PowerReport",
    "check_power",
    "pipeline_law",
    "E2EReport",
    "assert_e2e_lossless",
    "e2e_check",
    "exact_sequence_distribution",
    "VerifyCase",
    "assert_lossless_exact",
    "assert_same_distribution",
    "empirical_verify_check",
    "exact_output_distribution",
    "expected_accepted",
    "g_test",
    "prefix_index",
    "sample_cycle_outputs",
    "stop_probabilities",
    "target_distribution",
]
