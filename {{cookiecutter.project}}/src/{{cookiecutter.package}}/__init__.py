"""The {{ cookiecutter.model_name }} inference service.

Modules: ``spec`` (the model's tensors), ``model`` (the model), ``settings`` (environment variables),
``tuning`` (the tuned batching settings of ``tuning.json``, ``make tune``), ``service``
(``python -m {{ cookiecutter.package }}``) and ``client`` (the typed client SDK).
"""

__version__ = "0.1.0"
