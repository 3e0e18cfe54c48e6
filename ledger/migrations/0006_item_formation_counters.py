from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('ledger', '0005_item_trace_links'),
    ]

    operations = [
        migrations.AddField(
            model_name='benchmarkitem',
            name='formation_counters',
            field=models.JSONField(blank=True, default=dict),
        ),
    ]
