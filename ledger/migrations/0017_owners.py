"""What belongs to a key (issue 42): the key that filed a benchmark run
(blank for the command line's imports), and the provider's id of each
/v1/responses answer, indexed where it is set, so that another key's
previous_response_id is refused. On PostgreSQL both columns are added
without rewriting the tables (a constant default), and keep that default in the
database, so a server still on the previous release can go on inserting rows
while the others are upgraded; the partial index is made on the partitioned
parent and each day's partition."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('ledger', '0016_run_retrieval_config'),
    ]

    operations = [
        migrations.AddField(
            model_name='benchmarkrun',
            name='key_name',
            field=models.CharField(blank=True, db_index=True, db_default='', default='', max_length=64),
        ),
        migrations.AddField(
            model_name='trace',
            name='response_id',
            field=models.CharField(blank=True, db_default='', default='', max_length=100),
        ),
        migrations.AddIndex(
            model_name='trace',
            index=models.Index(condition=models.Q(('response_id', ''), _negated=True), fields=['response_id'], name='ledger_trace_response_id'),
        ),
    ]
