"""Ed25519 keys and signed checkpoints (C2SP signed-note / tlog-checkpoint text)."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest

from evaledger.domain.errors import ValidationError
from evaledger.domain.merkle import leaf_hash
from evaledger.domain.signing import (
    PublicKey,
    SignatureError,
    SigningKey,
    TreeHead,
    load_signing_key,
    open_checkpoint,
    sign_checkpoint,
    signing_key_from_env,
)

HEAD = TreeHead("evaledger/test", 12, leaf_hash(b"x"))


def test_a_key_round_trips_through_its_texts_and_signs_a_checkpoint_that_opens() -> None:
    key = SigningKey.generate("team-a")
    again = SigningKey.parse(key.to_text(), "here")
    assert again == key
    public = PublicKey.parse(str(key.public))
    assert public == key.public
    note = sign_checkpoint(HEAD, key)
    assert note.startswith("evaledger/test\n12\n")
    opened = open_checkpoint(note, [public])
    assert opened.head == HEAD
    assert opened.signer == public


def test_a_changed_byte_anywhere_in_a_checkpoint_fails() -> None:
    key = SigningKey.generate()
    note = sign_checkpoint(HEAD, key)
    for i in range(len(note)):
        changed = note[:i] + ("A" if note[i] != "A" else "B") + note[i + 1 :]
        with pytest.raises(SignatureError):
            open_checkpoint(changed, [key.public])


def test_a_checkpoint_signed_by_another_key_is_refused_naming_it() -> None:
    ours, theirs = SigningKey.generate("evaledger"), SigningKey.generate("evaledger")
    with pytest.raises(SignatureError, match="not by a trusted key"):
        open_checkpoint(sign_checkpoint(HEAD, theirs), [ours.public])


def test_a_public_key_with_a_wrong_hash_or_algorithm_is_refused() -> None:
    text = str(SigningKey.generate("k").public)
    name, _, enc = text.split("+", 2)
    with pytest.raises(SignatureError, match="hash"):
        PublicKey.parse(f"{name}+00000000+{enc}")
    with pytest.raises(SignatureError):
        PublicKey.parse("k+1234+!!!")


def test_a_key_file_open_to_others_is_refused_and_a_private_one_loads(tmp_path: Path) -> None:
    key = SigningKey.generate()
    path = tmp_path / "signing.key"
    path.write_text(key.to_text() + "\n")
    path.chmod(0o644)
    with pytest.raises(ValidationError, match="chmod 600"):
        load_signing_key(path)
    path.chmod(0o600)
    assert load_signing_key(path) == key
    assert signing_key_from_env({"EVALEDGER_SIGNING_KEY_FILE": str(path)}) == key
    assert signing_key_from_env({"EVALEDGER_SIGNING_KEY": key.to_text()}) == key
    assert signing_key_from_env({}) is None
    with pytest.raises(ValidationError, match="EVALEDGER_SIGNING_KEY"):
        signing_key_from_env({"EVALEDGER_SIGNING_KEY": "PRIVATE+KEY+x+0+" + os.urandom(4).hex()})


def test_a_signature_spelled_with_unused_base64_bits_set_is_refused() -> None:
    # 68 bytes (key hash ‖ signature) end in a 2-byte group: its third character carries two
    # unused bits, so flipping the lowest one decodes to the same bytes. Such a note would be a
    # second spelling of a signed checkpoint: refused, as any changed byte is.
    key = SigningKey.generate()
    note = sign_checkpoint(HEAD, key)
    body, _, line = note.rstrip("\n").rpartition("\n")
    prefix, _, signature = line.rpartition(" ")
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    last = signature.rstrip("=")
    flipped = alphabet[alphabet.index(last[-1]) ^ 1]
    twin = last[:-1] + flipped + "=" * (len(signature) - len(last))
    assert base64.b64decode(twin) == base64.b64decode(signature)
    forged = f"{body}\n{prefix} {twin}\n"
    with pytest.raises(SignatureError, match="canonical"):
        open_checkpoint(forged, [key.public])
