from __future__ import annotations

from icml25 import progress


def test_track_yields_everything_quiet_or_not(monkeypatch):
    monkeypatch.delenv("ICML25_QUIET", raising=False)
    assert not progress.is_quiet()
    assert list(progress.track(range(5), "counting")) == [0, 1, 2, 3, 4]
    progress.set_quiet(True)
    assert progress.is_quiet()
    assert list(progress.track(iter("abc"))) == ["a", "b", "c"]
    progress.set_quiet(False)
    assert not progress.is_quiet()


def test_nested_tracks_do_not_raise(monkeypatch):
    monkeypatch.delenv("ICML25_QUIET", raising=False)
    out = [(i, j) for i in progress.track(range(2)) for j in progress.track(range(2))]
    assert out == [(0, 0), (0, 1), (1, 0), (1, 1)]


def test_counter_is_silent_without_a_terminal_and_counts_on_one(monkeypatch, capsys):
    from icml25 import progress

    with progress.counter("x", 3) as step:  # pytest's stderr is not a terminal: silent
        step(), step()
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(progress, "_stderr_is_terminal", lambda: True)
    monkeypatch.delenv("ICML25_QUIET", raising=False)
    with progress.counter("x", 3) as step:
        for _ in range(3):
            step()
    with progress.counter("x", 3, disable=True) as step:
        step()
