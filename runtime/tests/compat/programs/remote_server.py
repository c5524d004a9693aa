"""A PyTriton 0.7 program: start Triton with a known access token and serve; other processes bind models to it.

Usage: remote_server.py <http port> <grpc port> <metrics port> <access token>
"""

import logging
import sys

from pytriton.triton import Triton, TritonConfig, TritonSecurityConfig

logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
http_port, grpc_port, metrics_port = (int(port) for port in sys.argv[1:4])
token = sys.argv[4]

config = TritonConfig(http_port=http_port, grpc_port=grpc_port, metrics_port=metrics_port, exit_timeout_secs=1)
with Triton(config=config, security_config=TritonSecurityConfig(access_token=token)) as triton:
    print("SERVING", flush=True)
    triton.serve()
print("SERVER DONE", flush=True)
