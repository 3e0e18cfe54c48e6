"""Trace.request_id becomes unique (Marina's own id; the spool's replay relies
on it) and the client's x-request-id moves to client_request_id.

Before, a client's x-request-id was taken as the trace id, so ids could
repeat: such traces keep their id as client_request_id, and all but the first
get the id `<id>~<pk>` (still under 64 characters: ids were at most 64, so it
is cut to make room)."""

from django.db import migrations, models


def split_ids(apps, schema_editor):
    Trace = apps.get_model("ledger", "Trace")
    Trace.objects.update(client_request_id=models.F("request_id"))
    Trace.objects.filter(request_id__startswith="req-").update(client_request_id="")
    repeated = (
        Trace.objects.values("request_id").annotate(n=models.Count("id")).filter(n__gt=1).values_list("request_id", flat=True)
    )
    for request_id in list(repeated):
        for trace in Trace.objects.filter(request_id=request_id).order_by("pk")[1:]:
            suffix = f"~{trace.pk}"
            trace.request_id = request_id[: 64 - len(suffix)] + suffix
            trace.save(update_fields=["request_id"])


class Migration(migrations.Migration):
    dependencies = [("ledger", "0008_lessons")]

    operations = [
        migrations.AddField(
            model_name="trace",
            name="client_request_id",
            field=models.CharField(blank=True, db_index=True, max_length=64),
        ),
        migrations.RunPython(split_ids, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="trace",
            name="request_id",
            field=models.CharField(max_length=64, unique=True),
        ),
    ]
