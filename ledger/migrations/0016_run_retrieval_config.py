from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('ledger', '0015_trace_partitions'),
    ]

    operations = [
        migrations.AddField(
            model_name='benchmarkrun',
            name='retrieval_config',
            field=models.CharField(blank=True, max_length=64),
        ),
        migrations.AddField(
            model_name='benchmarkrun',
            name='retrieval_config_kwargs',
            field=models.JSONField(blank=True, default=dict),
        ),
    ]
