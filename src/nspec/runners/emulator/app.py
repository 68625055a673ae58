"""The emulator's HTTP app, assembled from one module per API, each with its dialects and routes: the services in
OpenAI's format (`openai_api`: OpenAI at `http://HOST:PORT/v1`, Azure OpenAI at `http://HOST:PORT/azure`, Groq at
`http://HOST:PORT/groq/openai/v1`), Anthropic's (`http://HOST:PORT`, `anthropic_api`), Gemini's
(`http://HOST:PORT/google`, `google_api`), Mistral's (`http://HOST:PORT/mistral`, `mistral_api`) and Together's
(`http://HOST:PORT/together`, `together_api`). What their routes share is `routes`."""

from __future__ import annotations

from starlette.applications import Starlette

from nspec.runners.emulator import anthropic_api, google_api, mistral_api, openai_api, together_api
from nspec.runners.emulator.emulation import Emulation
from nspec.runners.emulator.routes import Api

APIS = (openai_api, anthropic_api, google_api, mistral_api, together_api)


def build_app(emu: Emulation) -> Starlette:
    """The emulator's app: each API's routes, in its own dialect; a path that is no route answered in the dialect of
    the API it belongs to."""
    api = Api(emu, [dialect for module in APIS for dialect in module.DIALECTS])
    routes = [route for module in APIS for route in module.routes(api)]
    return Starlette(routes=routes, exception_handlers={404: api.unknown_route, 405: api.unknown_route})
