"""How a command reaches a live cluster: an endpoints file, or bootstrap servers with Kafka-style security flags.

Goal: every command that talks to a cluster without the service (``snapshot take``, ``exec
run|drain|restore``) connects the way Kafka's own clients are configured, with the same flags:
``--bootstrap-servers`` plus ``--security-protocol``, ``--sasl-mechanism``, ``--sasl-username``,
``--sasl-password-file`` / ``--sasl-password-env``, ``--ssl-cafile``, ``--ssl-certfile``,
``--ssl-keyfile``, ... (named after Kafka's client properties ``security.protocol``,
``sasl.mechanism``, ``ssl.*``; see :data:`kafkaio.security.SECURITY_OPTIONS`), or an
``--endpoints-file`` whose cluster carries its own ``security`` object.
Method: :class:`ConnectOptions` is an option set (:mod:`controlplane.cli.option_set`);
:meth:`ConnectOptions.endpoints` builds the cluster's :class:`~kafkaio.endpoints.ClusterEndpoints`
through the one endpoints parser or :func:`kafkaio.security.security_from_options`.
Guarantee: a secret is never a flag value (passwords only by file or environment variable); an
inconsistent combination (a SASL flag without a SASL protocol, security flags beside an endpoints
file) is an :class:`~kafkaio.endpoints.EndpointsError` naming the flag, which the commands report
as exit 2. Cost: one file read at most.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from kafkaio.endpoints import ClusterEndpoints, EndpointsError, endpoints_from_options, load_endpoints_file
from kafkaio.security import SecurityError, security_from_options

PANEL = "Kafka connection"

ClusterOpt = Annotated[str, typer.Option("--cluster", "-c", help="cluster name (in the endpoints file)")]
EndpointsOpt = Annotated[Path | None, typer.Option(
    "--endpoints-file", "-e", help="endpoints JSON (kafkasim.endpoints/v1 shape; its cluster may carry a "
                                   "`security` object)", rich_help_panel=PANEL)]
BootstrapOpt = Annotated[str | None, typer.Option(
    help="host:port,... of a real cluster (instead of --endpoints-file)", rich_help_panel=PANEL)]
MetricsOpt = Annotated[list[str] | None, typer.Option(
    help="a broker's Prometheus endpoint, http(s)://host:port/metrics or ID=URL (repeatable)", rich_help_panel=PANEL)]
ExporterOpt = Annotated[list[str] | None, typer.Option(
    help="cluster-level exporter (e.g. kafka_exporter for consumer offsets), repeatable", rich_help_panel=PANEL)]
ProtocolOpt = Annotated[str | None, typer.Option(
    help="security.protocol: PLAINTEXT (default), SSL, SASL_PLAINTEXT or SASL_SSL", rich_help_panel=PANEL)]
MechanismOpt = Annotated[str | None, typer.Option(
    help="sasl.mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", rich_help_panel=PANEL)]
UserOpt = Annotated[str | None, typer.Option(help="SASL user name", rich_help_panel=PANEL)]
PasswordFileOpt = Annotated[str | None, typer.Option(
    help="file holding the SASL password (never give a password on the command line)", rich_help_panel=PANEL)]
PasswordEnvOpt = Annotated[str | None, typer.Option(
    help="environment variable holding the SASL password", rich_help_panel=PANEL)]
CaFileOpt = Annotated[str | None, typer.Option(help="CA certificate(s) (PEM) to trust the brokers",
                                               rich_help_panel=PANEL)]
CertFileOpt = Annotated[str | None, typer.Option(help="client certificate (PEM) for mutual TLS",
                                                 rich_help_panel=PANEL)]
KeyFileOpt = Annotated[str | None, typer.Option(help="client private key (PEM) for mutual TLS",
                                                rich_help_panel=PANEL)]
KeyPasswordFileOpt = Annotated[str | None, typer.Option(help="file holding the client key's password",
                                                        rich_help_panel=PANEL)]
KeyPasswordEnvOpt = Annotated[str | None, typer.Option(help="environment variable holding the client key's password",
                                                       rich_help_panel=PANEL)]
CheckHostnameOpt = Annotated[bool, typer.Option("--ssl-check-hostname/--no-ssl-check-hostname",
                                                help="verify the brokers' certificate host names",
                                                rich_help_panel=PANEL)]


@dataclass(frozen=True, kw_only=True)
class ConnectOptions:
    """Where the cluster is and how to authenticate to it (add a field here and every such command takes it)."""

    cluster: ClusterOpt
    endpoints_file: EndpointsOpt = None
    bootstrap_servers: BootstrapOpt = None
    metrics_url: MetricsOpt = None
    exporter_url: ExporterOpt = None
    security_protocol: ProtocolOpt = None
    sasl_mechanism: MechanismOpt = None
    sasl_username: UserOpt = None
    sasl_password_file: PasswordFileOpt = None
    sasl_password_env: PasswordEnvOpt = None
    ssl_cafile: CaFileOpt = None
    ssl_certfile: CertFileOpt = None
    ssl_keyfile: KeyFileOpt = None
    ssl_key_password_file: KeyPasswordFileOpt = None
    ssl_key_password_env: KeyPasswordEnvOpt = None
    ssl_check_hostname: CheckHostnameOpt = True

    def _security_flags(self) -> list[str]:
        given = [("--security-protocol", self.security_protocol), ("--sasl-mechanism", self.sasl_mechanism),
                 ("--sasl-username", self.sasl_username), ("--sasl-password-file", self.sasl_password_file),
                 ("--sasl-password-env", self.sasl_password_env), ("--ssl-cafile", self.ssl_cafile),
                 ("--ssl-certfile", self.ssl_certfile), ("--ssl-keyfile", self.ssl_keyfile),
                 ("--ssl-key-password-file", self.ssl_key_password_file),
                 ("--ssl-key-password-env", self.ssl_key_password_env)]
        flags = [flag for flag, value in given if value is not None]
        return flags + ([] if self.ssl_check_hostname else ["--no-ssl-check-hostname"])

    def endpoints(self) -> ClusterEndpoints:
        """The cluster's endpoints; :class:`EndpointsError` naming the file, JSON path or flag at fault."""
        if self.endpoints_file is not None:
            extra = [*(["--bootstrap-servers"] if self.bootstrap_servers else []),
                     *(["--metrics-url"] if self.metrics_url else []),
                     *(["--exporter-url"] if self.exporter_url else []), *self._security_flags()]
            if extra:
                raise EndpointsError(f"{', '.join(extra)}: not with --endpoints-file (its cluster carries the "
                                     "bootstrap servers, metrics endpoints and `security` object)")
            return load_endpoints_file(self.endpoints_file, self.cluster)
        if not self.bootstrap_servers:
            raise EndpointsError("give --endpoints-file, or --bootstrap-servers (with --metrics-url and the "
                                 "security flags your cluster needs)")
        try:
            security = security_from_options(
                self.security_protocol, self.sasl_mechanism, self.sasl_username, self.sasl_password_file,
                self.sasl_password_env, self.ssl_cafile, self.ssl_certfile, self.ssl_keyfile,
                self.ssl_key_password_file, self.ssl_key_password_env, self.ssl_check_hostname)
        except SecurityError as exc:
            raise EndpointsError(str(exc)) from None
        return endpoints_from_options(self.cluster, self.bootstrap_servers, list(self.metrics_url or []),
                                      list(self.exporter_url or []), security)
