from django.apps import AppConfig


class ReproConfig(AppConfig):
    name = "repro"
    verbose_name = "τ² reproduction kit"
