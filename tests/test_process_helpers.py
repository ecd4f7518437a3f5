"""The helpers the slow tiers read other processes with take a process that ended for gone."""

import signal
import subprocess
import sys

from helpers.processes import children, descendants, is_alive, kill_gone_or_not, read_proc, rows_so_far


def test_a_process_that_ended_is_gone_zombie_or_reaped_and_a_torn_row_is_not_read(tmp_path):
    """A process may end between any two reads of a test: exited but not reaped (a zombie: ESRCH
    for some reads) or reaped (ENOENT). Neither is an error, and a live one is seen as live."""
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        import time

        deadline = time.time() + 30
        while is_alive(ended.pid):  # exits, and stays a zombie until waited for
            assert time.time() < deadline, "the short process did not exit"
            time.sleep(0.02)
        for gone in ("zombie", "reaped"):
            assert not is_alive(ended.pid), gone
            assert children(ended.pid) == [] and descendants(ended.pid) == [], gone
            kill_gone_or_not([ended.pid], signal.SIGCONT)  # no ProcessLookupError
            ended.wait()
        assert read_proc(ended.pid, "environ") is None
        assert is_alive(live.pid) and read_proc(live.pid, "cmdline") is not None
    finally:
        live.kill()
        live.wait()
    kill_gone_or_not([live.pid])
    assert not is_alive(live.pid)

    rows = tmp_path / "metrics.jsonl"
    assert rows_so_far(rows) == []
    rows.write_text('{"step": 0}\n{"step": 1}\n{"st')  # the writer is in the middle of its third row
    assert rows_so_far(rows) == [{"step": 0}, {"step": 1}]
