"""The emulator's HTTP app, assembled from one module per API, each with its dialects and routes: the services in
OpenAI's format (`openai_api`: OpenAI at `http://HOST:PORT/v1`, Azure OpenAI at `http://HOST:PORT/azure`, Groq at
`http://HOST:PORT/groq/openai/v1`), Anthropic's (`http://HOST:PORT`, `anthropic_api`), Gemini's
(`http://HOST:PORT/google`, `google_api`), Mistral's (`http://HOST:PORT/mistral`, `mistral_api`) and Together's
(`http://HOST:PORT/together`, `together_api`). What their routes share is `routes`."""

from __future__ import annotations

from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from nspec.runners.emulator import anthropic_api, google_api, mistral_api, openai_api, together_api
from nspec.runners.emulator.emulation import Emulation
from nspec.runners.emulator.models import listed
from nspec.runners.emulator.routes import Api
from nspec.version import __version__

APIS = (openai_api, anthropic_api, google_api, mistral_api, together_api)
HELLO = {"emulator": "nspec", "version": __version__}  # what `GET /nspec` answers: an nspec emulator listens here


def build_app(emu: Emulation) -> Starlette:
    """The emulator's app: each API's routes, in its own dialect; a path that is no route answered in the dialect of
    the API it belongs to; and nspec's own (`nspec_routes`)."""
    api = Api(emu, [dialect for module in APIS for dialect in module.DIALECTS])
    routes = [*nspec_routes(emu), models_route(api), *(route for module in APIS for route in module.routes(api))]
    return Starlette(routes=routes, exception_handlers={404: api.unknown_route, 405: api.unknown_route})


def models_route(api: Api) -> Route:
    """`GET /v1/models`, OpenAI's and Anthropic's alike (the path is both APIs'): a request that names an
    `anthropic-version` is Anthropic's, in its dialect and shape; any other OpenAI's."""
    config = api.config

    async def openai_list(request: Request) -> Response:
        now = int(api.emu.clock.now())
        data = [
            {"id": m, "object": "model", "created": now, "owned_by": "system"} for m in listed("openai", config.models)
        ]
        return JSONResponse({"object": "list", "data": data})

    async def anthropic_list(request: Request) -> Response:
        names = listed("anthropic", config.models)
        data = [{"type": "model", "id": m, "display_name": m, "created_at": "2025-01-01T00:00:00Z"} for m in names]
        return JSONResponse({"data": data, "has_more": False, "first_id": names[0], "last_id": names[-1]})

    openai = api.route("openai", "GET", "/v1/models", openai_list)
    anthropic = api.route("anthropic", "GET", "/v1/models", anthropic_list)

    async def either(request: Request) -> Response:
        chosen = anthropic if "anthropic-version" in request.headers else openai
        response: Response = await chosen.endpoint(request)
        return response

    return Route("/v1/models", either, methods=["GET"])


def nspec_routes(emu: Emulation) -> list[Route]:
    """`GET /nspec`: who listens here; `POST /nspec/runs` `{run, models}`: a rehearsal's run directory, whose cells the
    responder then answers (the oracle and `cells` learn it), and the names its requests give their models that no
    provider serves (a local model's, an OpenAI-compatible server's), served from then on."""

    async def hello(request: Request) -> JSONResponse:
        return JSONResponse(HELLO)

    async def learn(request: Request) -> JSONResponse:
        told: Any = await request.json()
        if not isinstance(told, dict) or not isinstance(told.get("run"), str):
            return JSONResponse({"error": "give {run: the run directory, models: [names]}"}, status_code=400)
        learning = getattr(emu.responder, "learn", None)
        if learning is not None:
            learning(told["run"])
        for name in told.get("models") or []:
            if isinstance(name, str) and name not in emu.config.models:
                emu.config.models.append(name)
        return JSONResponse({"run": told["run"], "answered": learning is not None})

    return [Route("/nspec", hello, methods=["GET"]), Route("/nspec/runs", learn, methods=["POST"])]
