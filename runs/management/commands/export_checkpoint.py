"""Writes a run's latest signed checkpoint to a file or standard output; with an open plan,
its remaining items beside it (runs.record.export), which the checkpoint signs as a chain.

`--for-move` fences the source: in the same transaction the run stops here (cancelled,
"moved"), so an approved intent cannot be executed both here and where the file is imported.
A file is written atomically (a temporary file beside it, fsync, rename): a reader never sees
half a checkpoint, and a failed write leaves the run as it was.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from runs.exceptions import CheckpointError, RunsError
from runs.record.checkpoints import latest_verified
from runs.record.export import export_text
from runs.selectors import run_by_id
from runs.services import run_move_out


class Command(BaseCommand):
    help = (
        "Export RUN_ID's latest checkpoint (verified first) to -o FILE or stdout; "
        "--for-move also stops the run here so it lives on only where it is imported."
    )

    def add_arguments(self, parser):
        parser.add_argument("run_id")
        parser.add_argument("-o", "--output", help="file to write; stdout when omitted")
        parser.add_argument(
            "--for-move",
            action="store_true",
            help="stop the run here (cancelled, moved) in the same transaction as the export",
        )

    def handle(self, *args, run_id, output, for_move, **options):
        run = run_by_id(run_id)
        if run is None:
            raise CommandError(f"no run {run_id}")
        try:
            with transaction.atomic():
                body = (
                    run_move_out(run=run, actor="export_checkpoint --for-move")
                    if for_move
                    else export_text(run, latest_verified(run)[0])
                )
                if output:
                    _write_atomically(Path(output), body)
        except CheckpointError as error:
            raise CommandError(f"refusing to export an invalid checkpoint: {error}") from None
        except RunsError as error:
            raise CommandError(f"refusing to move run {run_id}: {error}") from None
        except OSError as error:
            raise CommandError(f"cannot write {output}: {error}; nothing changed") from None
        if not output:
            self.stdout.write(body)
        elif options["verbosity"]:
            moved = "; the run is stopped here (moved)" if for_move else ""
            self.stderr.write(f"checkpoint of run {run_id} written to {output}{moved}")


def _write_atomically(path: Path, text: str) -> None:
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)  # the rename itself survives a crash
    finally:
        os.close(directory)
