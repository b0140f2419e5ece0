"""Serve a trained model's deployed ranker over HTTP: ``rerank serve --model.model_name DIR [--serve.port 8080]``.

The options are those of every command (``--config`` files that stack, ``--model.model_name``), plus the server's
(``serve:`` in the YAML; :class:`~rerank.config.serve.ServeConfig`: host, port, limits, batching, device) and
``--ranker`` (``deployed``, the export's deployed ranker; ``reranker``, the pure cross-encoder). The model is loaded
before the server listens, so a wrong folder or a missing teacher fails in one line; the server then prints the
address it listens on, warms the model on one pair (``GET /ready`` answers 200 once it has) and answers Cohere's
``/v1/rerank`` and ``/v2/rerank`` and text-embeddings-inference's ``/rerank`` (:mod:`rerank.inference.serving.app`;
docs/serving.md). SIGTERM or Ctrl-C stops it taking requests, lets those in flight finish (at most
``serve.graceful_seconds``), then exits with status 0. Needs the ``serve`` extra
(``pip install "rerank-lightning[serve]"``).
"""

from __future__ import annotations

import signal
import socket
import sys
from typing import Literal

from lightning.pytorch.cli import LightningArgumentParser

from ..config.serve import ServeConfig
from ..core.errors import UserError
from ..core.logs import configure_logging
from ..inference.reranker import Reranker
from .arguments import RerankCLI, add_untrained_head_option
from .failures import run

DESCRIPTION = __doc__.splitlines()[0]


def _arguments(parser: LightningArgumentParser) -> None:
    parser.add_argument("--serve", type=ServeConfig, default=ServeConfig(),
                        help="how the server listens, batches and refuses (rerank.config.serve)")
    parser.add_argument("--ranker", type=Literal["deployed", "reranker"], default="deployed",
                        help="deployed: the ranker the model's export deploys (rerank.ranker.deployment); "
                             "reranker: the pure cross-encoder")
    add_untrained_head_option(parser)


def main(argv: list[str] | None = None) -> None:
    """Load the model, listen, serve until SIGTERM or Ctrl-C, drain, return."""
    try:
        import uvicorn

        from ..inference.serving.app import Service, create_app
    except ImportError as missing:
        raise UserError(f"rerank serve needs the serve extra ({missing.name} is missing): "
                        "pip install \"rerank-lightning[serve]\"") from None
    configure_logging()
    cli = RerankCLI(sys.argv[1:] if argv is None else argv, prog="rerank serve", description=DESCRIPTION,
                    arguments=_arguments, instantiate=False)
    config = cli.option("serve", ServeConfig)
    model = cli.config.model.model_name
    reranker = Reranker.from_pretrained(model, ranker=cli.config.ranker, untrained_head=cli.config.untrained_head,
                                        device=config.device,
                                        precision=config.precision, batch_size=config.batch_size,
                                        remember=config.remember)
    try:
        listening = socket.create_server((config.host, config.port))
    except OSError as error:
        raise OSError(f"--serve.host {config.host} --serve.port {config.port}: {error.strerror}") from None
    host, port = listening.getsockname()[:2]
    server = uvicorn.Server(uvicorn.Config(create_app(Service(model, reranker, config)), log_config=None,
                                           access_log=False, timeout_graceful_shutdown=config.graceful_seconds))
    untrained = ", with an untrained head: its scores rank at random" if reranker.untrained_head else ""
    print(f"rerank serve: {model} ({reranker.deployment.describe()}{untrained}) on http://{host}:{port} "
          "(GET /ready: 200 once warm)", flush=True)
    previous = {sig: signal.signal(sig, _drained) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:  # uvicorn drains on these signals, then raises them again: they then end here, with status 0
        server.run(sockets=[listening])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print("rerank serve: stopped", flush=True)


def _drained(signum: int, frame: object) -> None:
    """After uvicorn's graceful shutdown, the signal it raises again: nothing more to do."""


if __name__ == "__main__":
    run(main)
