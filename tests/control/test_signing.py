from __future__ import annotations

import hashlib
import hmac

import pytest
from django.core.exceptions import ImproperlyConfigured

from control.foundation.signing import SignatureError, sign, verify

KEY_A = ("key-a", b"secret-of-key-a-0123456789abcdef")
KEY_B = ("key-b", b"secret-of-key-b-fedcba9876543210")
PAYLOAD = b'{"run":"run-1","state_version":7,"phase":"waiting_approval"}'
HEX_DIGITS = "0123456789abcdef"


@pytest.fixture
def key_a_only(settings):
    settings.COUNTERSIGN_CHECKPOINT_KEYS = dict([KEY_A])
    return settings


def test_sign_returns_the_first_key_id_and_its_hmac_sha256(key_a_only):
    kid, mac = sign(PAYLOAD)

    assert kid == "key-a"
    assert mac == hmac.new(KEY_A[1], PAYLOAD, hashlib.sha256).hexdigest()


def test_a_signed_payload_verifies(key_a_only):
    kid, mac = sign(PAYLOAD)

    assert verify(PAYLOAD, kid=kid, mac=mac) is None


def test_an_empty_payload_signs_and_verifies(key_a_only):
    kid, mac = sign(b"")

    verify(b"", kid=kid, mac=mac)
    with pytest.raises(SignatureError):
        verify(b"\x00", kid=kid, mac=mac)


def test_the_first_listed_key_signs(settings):
    settings.COUNTERSIGN_CHECKPOINT_KEYS = dict([KEY_B, KEY_A])

    kid, mac = sign(PAYLOAD)

    assert kid == "key-b"
    assert mac == hmac.new(KEY_B[1], PAYLOAD, hashlib.sha256).hexdigest()


def test_a_payload_signed_before_rotation_still_verifies_under_the_second_key(settings):
    settings.COUNTERSIGN_CHECKPOINT_KEYS = dict([KEY_A])
    kid, mac = sign(PAYLOAD)

    settings.COUNTERSIGN_CHECKPOINT_KEYS = dict([KEY_B, KEY_A])

    verify(PAYLOAD, kid=kid, mac=mac)
    assert sign(PAYLOAD)[0] == "key-b"


def test_a_payload_signed_with_a_removed_key_fails_as_unknown_key(settings):
    settings.COUNTERSIGN_CHECKPOINT_KEYS = dict([KEY_A])
    kid, mac = sign(PAYLOAD)

    settings.COUNTERSIGN_CHECKPOINT_KEYS = dict([KEY_B])

    with pytest.raises(SignatureError) as caught:
        verify(PAYLOAD, kid=kid, mac=mac)
    assert caught.value.rule == "unknown_key"


def test_a_mac_presented_under_another_known_key_id_fails(settings):
    settings.COUNTERSIGN_CHECKPOINT_KEYS = dict([KEY_A, KEY_B])
    _, mac = sign(PAYLOAD)

    with pytest.raises(SignatureError) as caught:
        verify(PAYLOAD, kid="key-b", mac=mac)
    assert caught.value.rule == "bad_mac"


def test_flipping_any_bit_of_the_payload_fails(key_a_only):
    kid, mac = sign(PAYLOAD)

    for index in range(len(PAYLOAD)):
        for bit in range(8):
            tampered = bytearray(PAYLOAD)
            tampered[index] ^= 1 << bit
            with pytest.raises(SignatureError) as caught:
                verify(bytes(tampered), kid=kid, mac=mac)
            assert caught.value.rule == "bad_mac"


def test_a_truncated_or_extended_payload_fails(key_a_only):
    kid, mac = sign(PAYLOAD)

    for tampered in (PAYLOAD[:-1], PAYLOAD + b" ", b" " + PAYLOAD):
        with pytest.raises(SignatureError) as caught:
            verify(tampered, kid=kid, mac=mac)
        assert caught.value.rule == "bad_mac"


def test_changing_any_character_of_the_mac_fails(key_a_only):
    kid, mac = sign(PAYLOAD)

    for index, original in enumerate(mac):
        for replacement in HEX_DIGITS.replace(original, ""):
            tampered = mac[:index] + replacement + mac[index + 1 :]
            with pytest.raises(SignatureError) as caught:
                verify(PAYLOAD, kid=kid, mac=tampered)
            assert caught.value.rule == "bad_mac"


@pytest.mark.parametrize(
    "mangle",
    [
        pytest.param(str.upper, id="uppercase-hex"),
        pytest.param(lambda mac: mac[:-1], id="one-character-short"),
        pytest.param(lambda mac: mac + "0", id="one-character-long"),
        pytest.param(lambda mac: mac[:32], id="half"),
        pytest.param(lambda mac: "", id="empty"),
        pytest.param(lambda mac: "g" + mac[1:], id="non-hex-letter"),
        pytest.param(lambda mac: mac + "\n", id="trailing-newline"),
        pytest.param(lambda mac: " " + mac[1:], id="leading-space"),
        pytest.param(lambda mac: "\u0663" + mac[1:], id="non-ascii-digit"),
        pytest.param(lambda mac: "sha256:" + mac, id="prefixed"),
        pytest.param(lambda mac: bytes.fromhex(mac), id="raw-bytes"),
        pytest.param(lambda mac: mac.encode(), id="hex-as-bytes"),
        pytest.param(lambda mac: None, id="none"),
    ],
)
def test_a_mac_not_in_lowercase_hex_of_64_characters_is_malformed(key_a_only, mangle):
    kid, mac = sign(PAYLOAD)

    with pytest.raises(SignatureError) as caught:
        verify(PAYLOAD, kid=kid, mac=mangle(mac))
    assert caught.value.rule == "malformed_mac"


@pytest.mark.parametrize("kid", ["key-c", "", "KEY-A", "key-a ", None, ["key-a"], {"kid": 1}])
def test_a_key_id_not_configured_is_unknown(key_a_only, kid):
    _, mac = sign(PAYLOAD)

    with pytest.raises(SignatureError) as caught:
        verify(PAYLOAD, kid=kid, mac=mac)
    assert caught.value.rule == "unknown_key"


def test_signature_errors_read_as_sentences(key_a_only):
    _, mac = sign(PAYLOAD)

    with pytest.raises(SignatureError) as unknown:
        verify(PAYLOAD, kid="key-c", mac=mac)
    with pytest.raises(SignatureError) as bad:
        verify(PAYLOAD + b"!", kid="key-a", mac=mac)

    assert str(unknown.value) == "unknown signing key id 'key-c'"
    assert str(bad.value) == "MAC does not match under key 'key-a'"


@pytest.mark.parametrize(
    "keys",
    [pytest.param({}, id="no-keys"), pytest.param({"key-a": "a text secret"}, id="text-secret")],
)
def test_misconfigured_keys_are_improperly_configured(settings, keys):
    settings.COUNTERSIGN_CHECKPOINT_KEYS = keys

    with pytest.raises(ImproperlyConfigured):
        sign(PAYLOAD)
    with pytest.raises(ImproperlyConfigured):
        verify(PAYLOAD, kid="key-a", mac="0" * 64)
