from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("passthru", "0002_formation_state_and_crews"),
    ]

    operations = [
        migrations.CreateModel(
            name="SpendHold",
            fields=[
                ("id", models.BigIntegerField(primary_key=True, serialize=False)),
                ("day", models.DateField()),
                ("nanousd", models.BigIntegerField()),
                ("created_at", models.FloatField()),
            ],
            options={
                "db_table": "passthru_spendhold",
            },
        ),
    ]
