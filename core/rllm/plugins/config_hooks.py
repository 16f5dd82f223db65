"""The configuration hook: the config sections a plugin declares, checked and listed with rllm's own keys.

Part of the plugin author's reference, :mod:`rllm.plugins.hookspecs` (which says how a plugin is published and
what every hook shares).
"""

from __future__ import annotations

from rllm.plugins.markers import hookspec
from rllm.plugins.protocols import (
    ConfigSectionRegistrar,
)

__all__ = ["rllm_register_config_sections"]


@hookspec
def rllm_register_config_sections(register: ConfigSectionRegistrar) -> None:
    """Declare the config sections your plugin reads, so users can set them and see them.

    Keys declared here are checked (type, range, choices) before anything runs, get their
    defaults in every config, and are listed by ``rllm config --keys``.

    :param register: ``register(section, keys=None)``.

        ``section`` (str)
            Dotted path of the section, e.g. ``"rllm.my_backend"``; it must not be one of
            rllm's own keys or sections.
        ``keys`` (sequence of :class:`rllm.config.ConfigKey`, or None)
            One ``ConfigKey(name, type, default, doc, ...)`` per key, with ``name``
            relative to the section; ``type`` is ``"int"``, ``"float"``, ``"bool"``,
            ``"str"``, ``"list[str]"`` or ``"mapping"``, and ``choices``, ``minimum``,
            ``maximum`` and ``nullable`` bound the value. ``None`` accepts any key under the
            section without checking it (validate it in your backend's ``validate_config``).

    Example::

        from rllm.config import ConfigKey

        @rllm.hookimpl
        def rllm_register_config_sections(register):
            register("rllm.my_backend", [
                ConfigKey("endpoint", "str", "localhost:9000", "Address of the trainer service."),
                ConfigKey("retries", "int", 2, "Attempts per request.", minimum=0),
            ])
    """
