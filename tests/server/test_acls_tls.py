"""The principal of an SSL connection with a client certificate is ``User:`` and the certificate's subject DN as
Kafka prints it (RFC 2253, last RDN first): ACLs name it, and the broker's refusals log it. The client's host
as Java writes an address."""
from __future__ import annotations

import datetime
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, ResourcePatternType,
                                   ResourceType)

from storage_engine.server.errors import ErrorCode
from storage_engine.server.peer import acl_host, subject_dn
from tests.server import wire
from tests.server.test_security import make_certificate

pytestmark = pytest.mark.e2e

DN = "User:CN=alice,OU=ops,O=Example\\, Inc,C=US"


def client_certificate(directory: Path) -> tuple[Path, Path]:
    """A self-signed client certificate (subject C=US, O=Example, Inc, OU=ops, CN=alice) and its key."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COUNTRY_NAME, "US"),
                      x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Example, Inc"),
                      x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "ops"),
                      x509.NameAttribute(NameOID.COMMON_NAME, "alice")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(key, hashes.SHA256()))
    # what Java's X500Principal.getName() prints for it (RFC 2253), computed by cryptography independently
    assert "User:" + cert.subject.rfc4514_string() == DN
    cert_path, key_path = directory / "client.pem", directory / "client.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def test_subject_dn_text():
    subject = ((("countryName", "US"),), (("organizationName", "Example, Inc"),),
               (("organizationalUnitName", "ops"),), (("commonName", "alice"),))
    assert "User:" + subject_dn(subject) == DN
    assert subject_dn(((("commonName", "#x "),),)) == "CN=\\#x\\ "          # a leading # and a trailing space
    assert subject_dn(((("commonName", " #x;"), ("emailAddress", "a@b.c")),)) == \
        "CN=\\ #x\\;+1.2.840.113549.1.9.1=#16056140622e63"


@pytest.mark.parametrize("ip, host", [("127.0.0.1", "127.0.0.1"), ("::1", "0:0:0:0:0:0:0:1"),
                                      ("fe80::1%eth0", "fe80:0:0:0:0:0:0:1%eth0"), ("::ffff:10.1.2.3", "10.1.2.3"),
                                      ("2001:db8::a:0:0:1", "2001:db8:0:0:a:0:0:1")])
def test_acl_host_is_written_as_java_writes_the_address(ip, host):
    assert acl_host(ip) == host


def test_the_client_certificate_is_the_principal(broker_factory, tmp_path):
    keystore, ca = make_certificate(tmp_path, "keystore-pass")
    cert, key = client_certificate(tmp_path)
    server = broker_factory(broker={"ssl.keystore.location": str(keystore), "ssl.key.password": "keystore-pass",
                                    "ssl.truststore.location": str(cert), "ssl.client.auth": "required",
                                    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                                    "super.users": "User:ANONYMOUS"},
                            listeners="SSL://127.0.0.1:0,PLAINTEXT://127.0.0.1:0")
    client = AdminClient({"bootstrap.servers": server.address("SSL"), "security.protocol": "SSL",
                          "ssl.ca.location": str(ca), "ssl.certificate.location": str(cert),
                          "ssl.key.location": str(key)})
    acl = AclBinding(ResourceType.TOPIC, "t", ResourcePatternType.LITERAL, "User:bob", "*", AclOperation.READ,
                     AclPermissionType.ALLOW)
    with pytest.raises(KafkaException) as got:
        client.create_acls([acl])[acl].result(timeout=30)
    assert got.value.args[0].code() == ErrorCode.cluster_authorization_failed
    assert f"refused: principal={DN} host=127.0.0.1 operation=ALTER resource=CLUSTER:kafka-cluster " \
           f"api=CreateAcls" in server.log_text()
    # the super user (PLAINTEXT's ANONYMOUS) grants ALTER on the cluster to the certificate's DN
    conn = wire.Conn(server.address("PLAINTEXT"))
    try:
        grant = {"resource_type": 4, "resource_name": "kafka-cluster", "resource_pattern_type": 3,
                 "principal": DN, "host": "127.0.0.1", "operation": 7, "permission_type": 3}
        answer = conn.request(wire.build_request(30, 3, creations=[grant]))
        assert [r.error_code for r in answer.results] == [ErrorCode.none]
    finally:
        conn.close()
    assert client.create_acls([acl])[acl].result(timeout=30) is None
    assert server.stop() == 0
