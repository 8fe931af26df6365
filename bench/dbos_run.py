"""One process of the DBOS comparison: N one-step workflows, run one after another.

Started by bench.measure as `python -m bench.dbos_run URL COUNT START_AT`; it launches DBOS
against the system database URL, waits until START_AT (a shared wall-clock instant, so that
several processes start together), runs COUNT workflows and prints
"<first start> <last end> <count>" as epoch seconds.
"""

from __future__ import annotations

import logging
import sys
import time

from dbos import DBOS, DBOSConfig


@DBOS.step()
def bench_step(number: int) -> int:
    return number


@DBOS.workflow()
def bench_workflow(number: int) -> int:
    return bench_step(number)


def main(url: str, count: int, start_at: float) -> None:
    logging.disable(logging.WARNING)
    config: DBOSConfig = {
        "name": "countersign-bench",
        "system_database_url": url,
        "run_admin_server": False,
        "enable_otlp": False,
    }
    DBOS(config=config)
    DBOS.launch()
    bench_workflow(-1)  # warm up: connections, prepared paths
    time.sleep(max(0.0, start_at - time.time()))
    started = time.time()
    for number in range(count):
        bench_workflow(number)
    ended = time.time()
    print(f"{started} {ended} {count}", flush=True)
    DBOS.destroy()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]))
