r"""Ed25519 keys and signed checkpoints in the transparency logs' own text formats.

Formats (C2SP `signed-note` and `tlog-checkpoint`, as Go's checksum database, Sigstore's Rekor
and Trillian's witnesses write them), so a published head reads like any transparency log's:

- a private key: `PRIVATE+KEY+<name>+<key hash, 8 hex>+<base64(0x01 ‖ 32-byte seed)>`, one line,
  kept in a 0600 file or an environment variable;
- a public (verifier) key: `<name>+<key hash>+<base64(0x01 ‖ 32-byte public key)>`, the text
  `evaledger key show` prints and an auditor is handed;
- the key hash: the first 4 bytes of SHA-256(name ‖ "\n" ‖ 0x01 ‖ public key);
- a checkpoint: the note `<origin>\n<tree size>\n<base64 root>\n`, a blank line, then one
  signature line `— <name> <base64(key hash ‖ Ed25519 signature of the note)>` per signer.

Only `cryptography`'s Ed25519 signs and verifies; nothing here reads a store.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from evaledger.domain.errors import InfrastructureError, ValidationError
from evaledger.domain.store.permissions import shared_mode

SIGNING_KEY_ENV = "EVALEDGER_SIGNING_KEY"
"""The private key itself (`PRIVATE+KEY+…`), for a process that is given no file."""
SIGNING_KEY_FILE_ENV = "EVALEDGER_SIGNING_KEY_FILE"
"""The file holding the private key (0600)."""
ALG_ED25519 = b"\x01"
DASH = "\u2014"
NAME = re.compile(r"[^\s+]{1,128}")
MAX_NOTE_BYTES = 64 * 1024
MAX_SIGNATURES = 16


class SignatureError(ValueError):
    """A key, a note or a signature that does not verify: the message names which."""


def _b64decode(text: str, what: str) -> bytes:
    """Decode canonical base64 only.

    A last character whose unused bits are set decodes to the same bytes as the canonical one:
    the same note or key would have two spellings.
    """
    try:
        encoded = text.encode("ascii")
        raw = base64.b64decode(encoded, validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise SignatureError(f"{what} is not base64") from None
    if base64.b64encode(raw) != encoded:
        raise SignatureError(f"{what} is not canonical base64")
    return raw


def key_hash(name: str, public: bytes) -> bytes:
    """The 4-byte id of a key (signed-note key hash)."""
    return hashlib.sha256(name.encode() + b"\n" + ALG_ED25519 + public).digest()[:4]


@dataclass(frozen=True)
class PublicKey:
    """A verifier key: a name and an Ed25519 public key."""

    name: str
    raw: bytes

    @property
    def hash(self) -> bytes:
        """The key hash signatures name."""
        return key_hash(self.name, self.raw)

    @property
    def key_id(self) -> str:
        """`name+hash`: how reports and receipts name the key."""
        return f"{self.name}+{self.hash.hex()}"

    def __str__(self) -> str:
        encoded = base64.b64encode(ALG_ED25519 + self.raw).decode()
        return f"{self.key_id}+{encoded}"

    @classmethod
    def parse(cls, text: str) -> PublicKey:
        """A verifier key as `key show` prints it (SignatureError when it is not one)."""
        parts = text.strip().split("+", 2)  # base64 may hold "+" itself
        if len(parts) != 3 or not NAME.fullmatch(parts[0]):
            raise SignatureError(
                "the public key is not NAME+HASH+KEY (as `evaledger key show` prints it)"
            )
        name, hash_hex, encoded = parts
        body = _b64decode(encoded, "the public key")
        if len(body) != 33 or body[:1] != ALG_ED25519:
            raise SignatureError("the public key is not an Ed25519 key")
        key = cls(name, body[1:])
        if key.hash.hex() != hash_hex.lower():
            raise SignatureError("the public key's hash does not match its name and key")
        return key

    def verify(self, message: bytes, signature: bytes) -> bool:
        """Whether `signature` is this key's Ed25519 signature of `message`."""
        try:
            Ed25519PublicKey.from_public_bytes(self.raw).verify(signature, message)
        except (InvalidSignature, ValueError):
            return False
        return True


@dataclass(frozen=True)
class SigningKey:
    """A private Ed25519 key and its name."""

    name: str
    seed: bytes

    @classmethod
    def generate(cls, name: str = "evaledger") -> SigningKey:
        """A fresh key from the operating system's randomness."""
        if not NAME.fullmatch(name):
            raise ValidationError(
                f"key name {name!r}: 1–128 characters, no spaces and no '+'", field="name"
            )
        return cls(name, os.urandom(32))

    @property
    def _private(self) -> Ed25519PrivateKey:
        return Ed25519PrivateKey.from_private_bytes(self.seed)

    @property
    def public(self) -> PublicKey:
        """The verifier key to publish."""
        raw = self._private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        return PublicKey(self.name, raw)

    def sign(self, message: bytes) -> bytes:
        """The Ed25519 signature of `message`."""
        return self._private.sign(message)

    def to_text(self) -> str:
        """`PRIVATE+KEY+name+hash+base64(0x01 ‖ seed)`: what the key file holds."""
        encoded = base64.b64encode(ALG_ED25519 + self.seed).decode()
        return f"PRIVATE+KEY+{self.public.key_id}+{encoded}"

    @classmethod
    def parse(cls, text: str, where: str) -> SigningKey:
        """A private key in its text form (ValidationError naming `where` otherwise)."""
        parts = text.strip().split("+", 4)  # base64 may hold "+" itself
        bad = ValidationError(
            f"{where} is not an evaledger signing key (PRIVATE+KEY+NAME+HASH+KEY, as `evaledger "
            "key init` writes it)",
            field="signing_key",
        )
        if len(parts) != 5 or parts[:2] != ["PRIVATE", "KEY"] or not NAME.fullmatch(parts[2]):
            raise bad
        try:
            body = _b64decode(parts[4], where)
        except SignatureError:
            raise bad from None
        if len(body) != 33 or body[:1] != ALG_ED25519:
            raise bad
        key = cls(parts[2], body[1:])
        if key.public.hash.hex() != parts[3].lower():
            raise bad
        return key


def load_signing_key(path: str | Path) -> SigningKey:
    """The private key in a file readable by its owner only (as ssh refuses a shared key)."""
    mode = shared_mode(path)
    if mode is not None:
        raise ValidationError(
            f"signing key file {str(path)!r} is open to other users (mode {mode:04o}): it must "
            f"be readable by its owner only (chmod 600 {path})",
            field="signing_key",
        )
    try:
        text = Path(path).read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as e:
        raise InfrastructureError(f"signing key file {str(path)!r}: {e}") from None
    return SigningKey.parse(text, f"signing key file {str(path)!r}")


def signing_key_from_env(env: dict[str, str] | None = None) -> SigningKey | None:
    """The key of `EVALEDGER_SIGNING_KEY` (the key) or `EVALEDGER_SIGNING_KEY_FILE`; else None."""
    env = dict(os.environ) if env is None else env
    if env.get(SIGNING_KEY_ENV):
        return SigningKey.parse(env[SIGNING_KEY_ENV], SIGNING_KEY_ENV)
    if env.get(SIGNING_KEY_FILE_ENV):
        return load_signing_key(env[SIGNING_KEY_FILE_ENV])
    return None


@dataclass(frozen=True)
class TreeHead:
    """What a checkpoint states: the log's origin, its tree size and root."""

    origin: str
    size: int
    root: bytes

    def body(self) -> str:
        """The note's text (tlog-checkpoint): origin, size, base64 root, each on a line."""
        return f"{self.origin}\n{self.size}\n{base64.b64encode(self.root).decode()}\n"

    @classmethod
    def parse_body(cls, body: str) -> TreeHead:
        """The head a note states (SignatureError when it states none)."""
        lines = body.split("\n")
        if len(lines) < 4 or lines[-1] != "" or not lines[0] or not lines[1].isdigit():
            raise SignatureError("the checkpoint is not ORIGIN / SIZE / ROOT lines")
        if len(lines[1]) > 1 and lines[1].startswith("0"):
            raise SignatureError("the checkpoint's size has leading zeros")
        root = _b64decode(lines[2], "the checkpoint's root")
        if len(root) != 32:
            raise SignatureError("the checkpoint's root is not a SHA-256 hash")
        return cls(lines[0], int(lines[1]), root)


@dataclass(frozen=True)
class SignedCheckpoint:
    """A tree head, the note's exact text, and the key that signed it."""

    head: TreeHead
    text: str
    signer: PublicKey


def sign_checkpoint(head: TreeHead, key: SigningKey) -> str:
    """The signed note of a tree head."""
    body = head.body()
    signature = base64.b64encode(key.public.hash + key.sign(body.encode())).decode()
    return f"{body}\n{DASH} {key.name} {signature}\n"


def open_checkpoint(text: str, keys: Iterable[PublicKey]) -> SignedCheckpoint:
    """Check a signed checkpoint against trusted keys: the head, and the key that signed it.

    SignatureError names what fails: the format, an unknown key, or a signature that does not
    verify (the note was changed after signing, or another key signed it).
    """
    if len(text.encode()) > MAX_NOTE_BYTES:
        raise SignatureError("the checkpoint is larger than a checkpoint can be")
    body, sep, signatures = text.partition("\n\n")
    if not sep or not signatures.endswith("\n"):
        raise SignatureError("the checkpoint has no signature lines")
    body += "\n"
    head = TreeHead.parse_body(body)
    trusted = {(k.name, k.hash): k for k in keys}
    lines = signatures[:-1].split("\n")
    if len(lines) > MAX_SIGNATURES:
        raise SignatureError("the checkpoint has too many signature lines")
    unknown: list[str] = []
    for line in lines:
        parts = line.split(" ")
        if len(parts) != 3 or parts[0] != DASH:
            raise SignatureError("a checkpoint signature line is not '— NAME SIGNATURE'")
        raw = _b64decode(parts[2], "the checkpoint's signature")
        key = trusted.get((parts[1], raw[:4]))
        if key is None:
            unknown.append(f"{parts[1]}+{raw[:4].hex()}")
            continue
        if not key.verify(body.encode(), raw[4:]):
            raise SignatureError(
                f"the checkpoint's signature by {key.key_id} does not verify (the checkpoint "
                "was changed after it was signed, or the signature was forged)"
            )
        return SignedCheckpoint(head, text, key)
    raise SignatureError(
        f"the checkpoint is signed by {', '.join(unknown)}, not by a trusted key (another key "
        "signed it)"
    )


def rotation_statement(old: PublicKey, new: PublicKey) -> bytes:
    """What the old key signs when it hands over to the new one."""
    return f"evaledger signing key rotation\n{old}\n{new}\n".encode()


def sign_rotation(old: SigningKey, new: PublicKey) -> str:
    """The old key's signature of its hand-over (base64)."""
    return base64.b64encode(old.sign(rotation_statement(old.public, new))).decode()


def trusted_keys(current: PublicKey, rotations: Iterable[tuple[str, str, str]]) -> list[PublicKey]:
    """The current key and every key it replaced through a hand-over signed by the old key.

    `rotations` are (old key, new key, signature) as recorded; one whose new key is not trusted
    already, or whose signature does not verify, adds nothing.
    """
    trusted = [current]
    recorded = list(rotations)
    grew = True
    while grew:
        grew = False
        for old_text, new_text, signature in recorded:
            try:
                old, new = PublicKey.parse(old_text), PublicKey.parse(new_text)
                raw = _b64decode(signature, "the rotation's signature")
            except SignatureError:
                continue
            if (
                new in trusted
                and old not in trusted
                and old.verify(rotation_statement(old, new), raw)
            ):
                trusted.append(old)
                grew = True
    return trusted
