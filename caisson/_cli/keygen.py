"""`caisson keygen`: create the operator's Ed25519 key pair under $CAISSON_HOME."""

from __future__ import annotations

import argparse

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("keygen", help="create the operator signing key pair")
    p.add_argument("--force", action="store_true", help="replace an existing key pair")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from caisson.home import operator_key_paths
    from ledger import generate_keypair

    private, public = operator_key_paths()
    key = generate_keypair(private, public, overwrite=args.force)
    print(f"private key {private} (mode 0600)")
    print(f"public key  {public}")
    print(f"fingerprint {key.fingerprint}")
    return 0
