"""The clusters of a resource (source and target): addresses, TLS, authentication through Secrets."""
from __future__ import annotations

from enum import Enum
from typing import Any

from pydantic import ConfigDict, Field

from .schemabase import StrictModel, cel, connect_only, validations


class CertSecretSource(StrictModel):
    model_config = ConfigDict(json_schema_extra=validations(
        cel("has(self.certificate) != has(self.pattern)", "exactly one of certificate or pattern must be set")))
    secretName: str = Field(description="The name of the Secret containing the certificate.",
                            max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    certificate: str | None = Field(None, description="The name of the certificate file (key) in the Secret.",
                                    max_length=253)
    pattern: str | None = Field(None, description="Glob pattern of the certificate files (keys) in the Secret; "
                                                  "every matching key is trusted.", max_length=253)


class ClientTls(StrictModel):
    trustedCertificates: list[CertSecretSource] = Field(
        default_factory=list, description="Trusted certificates for the TLS connection, from Secrets.",
        max_length=32)


class PasswordSecretSource(StrictModel):
    secretName: str = Field(description="The name of the Secret containing the password.", max_length=253)
    password: str = Field(description="The key in the Secret under which the password is stored.", max_length=253)


class CertAndKeySecretSource(StrictModel):
    secretName: str = Field(description="The name of the Secret containing the certificate and key.",
                            max_length=253)
    certificate: str = Field(description="The key of the certificate (PEM) in the Secret.", max_length=253)
    key: str = Field(description="The key of the private key (PEM, PKCS #8) in the Secret.", max_length=253)


class AuthenticationType(str, Enum):
    TLS = "tls"
    SCRAM_SHA_256 = "scram-sha-256"
    SCRAM_SHA_512 = "scram-sha-512"
    PLAIN = "plain"
    CUSTOM = "custom"


class ClientAuthentication(StrictModel):
    model_config = ConfigDict(json_schema_extra=validations(
        cel("self.type != 'tls' || has(self.certificateAndKey)",
            "authentication of type tls needs certificateAndKey", ".certificateAndKey"),
        cel("!(self.type in ['scram-sha-256', 'scram-sha-512', 'plain']) || (has(self.username) && "
            "has(self.passwordSecret))",
            "authentication of type scram-sha-256, scram-sha-512 or plain needs username and passwordSecret",
            ".passwordSecret")))
    type: AuthenticationType = Field(description="Authentication type: tls (mTLS client certificate), "
                                                 "scram-sha-256, scram-sha-512, plain, or custom "
                                                 "(accepted, not supported: reported on the status).")
    username: str | None = Field(None, description="Username for SASL authentication.", max_length=253)
    passwordSecret: PasswordSecretSource | None = Field(None, description="Reference to the Secret holding the "
                                                                         "password; never inline.")
    certificateAndKey: CertAndKeySecretSource | None = Field(None, description="Reference to the Secret holding "
                                                                              "the client certificate and key.")
    allowPlaintextCredentials: bool = Field(
        False, description="Allow a password (scram-sha-256, scram-sha-512, plain) to be sent to a cluster "
                           "without tls, that is over a plaintext listener where anyone on the network can read "
                           "it. Off by default: such a resource is refused.")
    sasl: bool | None = Field(None, description="Custom authentication only: enable SASL.")
    config: dict[str, Any] | None = Field(None, description="Custom authentication only: its properties.")


PLAINTEXT_CREDENTIALS = ("!has(self.authentication) || !(self.authentication.type in ['scram-sha-256', "
                         "'scram-sha-512', 'plain']) || has(self.tls) || "
                         "(has(self.authentication.allowPlaintextCredentials) && "
                         "self.authentication.allowPlaintextCredentials)")
PLAINTEXT_CREDENTIALS_MESSAGE = ("a password must not travel over a plaintext listener: set tls, or "
                                 "authentication.allowPlaintextCredentials: true to accept it")


class ClusterSpec(StrictModel):
    model_config = ConfigDict(json_schema_extra=validations(
        cel(PLAINTEXT_CREDENTIALS, PLAINTEXT_CREDENTIALS_MESSAGE, ".authentication")))
    alias: str = Field(description="Alias of the cluster; names remote topics (<alias><separator><topic>) "
                                   "and must be unique in the resource.",
                       min_length=1, max_length=63, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    bootstrapServers: str = Field(description="Comma-separated host:port list to bootstrap from.",
                                  min_length=1, max_length=2048)
    tls: ClientTls | None = Field(None, description="TLS settings; when set, connections use TLS.")
    authentication: ClientAuthentication | None = Field(None, description="Authentication to the cluster.")
    config: dict[str, Any] = Field(
        default_factory=dict,
        description="Client properties for this cluster. Kafka Connect worker properties (storage topics, "
                    "converters, ...) are accepted and reported as not applicable; other keys are passed to "
                    "the job's Kafka clients.")


class TargetClusterSpec(ClusterSpec):
    groupId: str | None = connect_only("Kafka Connect group id.", max_length=253)
    configStorageTopic: str | None = connect_only("Kafka Connect config storage topic.", max_length=249)
    statusStorageTopic: str | None = connect_only("Kafka Connect status storage topic.", max_length=249)
    offsetStorageTopic: str | None = connect_only("Kafka Connect offset storage topic.", max_length=249)
