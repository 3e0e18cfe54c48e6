from django.apps import AppConfig


class PassthruConfig(AppConfig):
    name = "passthru"
    verbose_name = "Model API passthru"

    def ready(self) -> None:
        from passthru import auth

        auth.warn_if_open()
