"""Start llama.cpp's own HTTP server (the xllamacpp wheel) on 127.0.0.1.

Usage: serve.py MODEL.gguf PORT N_CTX [TEMPLATE.jinja]

Prints one line `listening <address>` once the server object exists, then
sleeps until SIGTERM/SIGINT. run.sh polls /health itself; this script only
keeps the in-process server alive.
"""

import os
import signal
import sys
import threading

import xllamacpp as xlc


def main() -> int:
    model, port, n_ctx = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    params = xlc.CommonParams()
    params.model.path = model
    params.hostnames = ["127.0.0.1"]
    params.port = port
    params.n_ctx = n_ctx
    params.n_parallel = 1
    # Chat templates through jinja: llama.cpp's native tool-call parsing and
    # its tool_choice grammar need it.
    params.use_jinja = True
    params.endpoint_props = True
    params.model_alias = {os.environ.get("MODEL_ALIAS", "smollm2")}
    if len(sys.argv) > 4:
        # A chat template of our own (the GGUF's may leave tools out).
        with open(sys.argv[4], encoding="utf-8") as f:
            params.chat_template = f.read()
    params.cpuparams.n_threads = 2
    params.cpuparams_batch.n_threads = 2
    server = xlc.Server(params)
    print(f"listening {server.listening_address}", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.wait(1.0):
        pass
    del server
    return 0


if __name__ == "__main__":
    sys.exit(main())
