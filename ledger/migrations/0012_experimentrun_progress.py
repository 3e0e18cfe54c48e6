from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("ledger", "0011_run_unpriced_calls")]

    operations = [
        migrations.AddField(
            model_name="experimentrun",
            name="progress",
            field=models.JSONField(blank=True, default=dict),
        ),
    ]
