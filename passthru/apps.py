from django.apps import AppConfig


class PassthruConfig(AppConfig):
    name = "passthru"
    verbose_name = "Model API passthru"

    def ready(self) -> None:
        from django.conf import settings

        from passthru import auth

        auth.warn_if_open()
        if settings.MARINA_PROVIDERS.get("openai", {}).get("api_key"):
            # Load the model catalogue now, beside start-up, rather than on the
            # first openai call (it takes ~0.6 s).
            import threading

            from passthru.bodyprep import openai_model_facts

            threading.Thread(target=openai_model_facts, args=("gpt-5",), daemon=True, name="catalogue").start()
