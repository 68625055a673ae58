"""`nspec emulator`: a local OpenAI- and Anthropic-compatible API (batch and live) for rehearsals and tests."""

from nspec.runners.emulator.config import EmulatorConfig, load_config
from nspec.runners.emulator.server import Emulator

__all__ = ["Emulator", "EmulatorConfig", "load_config"]
