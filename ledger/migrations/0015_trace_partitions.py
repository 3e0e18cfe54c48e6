"""Spans carry their trace's started_at, and on PostgreSQL (with
MARINA_TRACE_PARTITIONS on, the default) traces and spans become partitioned
by day (ledger/spend/partitions.py).

The conversion copies both tables into their partitioned shape in this
migration's transaction, holding ACCESS EXCLUSIVE locks on both (and on the
links) until it commits: trace writes wait for it, as for any migration that
rewrites a table (docs/scaling.md gives its time at 2M traces). Reversing the
migration keeps the partitioned tables and the column; SQLite's tables are
only given the column."""
from datetime import UTC, datetime

from django.conf import settings
from django.db import migrations, models

from ledger.spend import partitions

# A placeholder for the column while it is added; every row is given its trace's value below.
_PLACEHOLDER = datetime(1970, 1, 1, tzinfo=UTC)


def fill_or_partition(apps, schema_editor):
    connection = schema_editor.connection
    if connection.vendor == "postgresql" and settings.MARINA_TRACE_PARTITIONS:
        partitions.convert()  # the copy gives every span its trace's started_at
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE ledger_span SET trace_started_at = "
            "(SELECT started_at FROM ledger_trace WHERE ledger_trace.id = ledger_span.trace_id)"
        )


class Migration(migrations.Migration):
    dependencies = [("ledger", "0014_item_run_task_totals")]

    operations = [
        migrations.AddField(
            model_name="span",
            name="trace_started_at",
            field=models.DateTimeField(default=_PLACEHOLDER),
            preserve_default=False,
        ),
        migrations.RunPython(fill_or_partition, migrations.RunPython.noop),
    ]
