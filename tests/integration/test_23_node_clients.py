"""Real Node.js lock clients (ioredis 6 under its default RESP3, node-redlock,
redis-semaphore), their workers split across two zkresp sidecars on one
ZooKeeper, contending for one resource: no two holders overlap (a semaphore
never exceeds its limit), and both sidecars' clients get to hold it.  The
ioredis-watch scenario is Redis's lock without scripts (a release by WATCH,
GET, MULTI, DEL, EXEC) beside a counter added to optimistically: no add is
lost."""
import json
import os
import subprocess

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "node", "clients.js")


@pytest.mark.parametrize("scenario", ["ioredis-script", "ioredis-watch", "redlock", "mutex", "semaphore"])
def test_node_clients_two_sidecars(zkresp_pair, scenario):
    a, b = zkresp_pair
    proc = subprocess.run(["node", SCRIPT, scenario, str(a.port), str(b.port), "3"],
                          capture_output=True, text=True, timeout=60)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("{")]
    assert lines, "no summary from node: stdout=%r stderr=%r" % (proc.stdout, proc.stderr[-2000:])
    summary = json.loads(lines[-1])
    print(summary)
    assert proc.returncode == 0, (summary, proc.stderr[-2000:])
    assert summary["holds"] >= 5, summary
    assert summary["max_concurrent"] <= summary["limit"], summary
    if scenario == "ioredis-watch":
        # six workers adding to one counter over two sidecars: some EXECs
        # found it changed since their WATCH
        assert summary["aborted"] >= 1, summary
    if scenario in ("mutex", "semaphore"):
        # holds past lockTimeout, kept only by the library's refresh
        assert summary["refreshed_holds"] >= 1, summary
