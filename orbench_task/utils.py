"""lm-evaluation-harness hooks of the task 'orbench_hard', written by
icml25.orbench.lm_eval_task.to_lm_eval_task. A response is judged by keyword matching (OR-Bench,
Cui et al., ICML 2025, Sec. 4.1); None or empty responses count as refused."""

from icml25.orbench.refusal import KeywordRefusalDetector

DETECTOR = KeywordRefusalDetector.default()


def process_results(doc, results):
    """``refusal_rate`` of one prompt: 1.0 when the model refused, else 0.0."""
    response = results[0] if results else None
    return {"refusal_rate": float(DETECTOR(response))}
