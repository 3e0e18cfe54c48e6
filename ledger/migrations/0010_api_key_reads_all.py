from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('ledger', '0009_trace_request_id_unique'),
    ]

    operations = [
        migrations.AddField(
            model_name='apikey',
            name='reads_all',
            field=models.BooleanField(default=False),
        ),
    ]
