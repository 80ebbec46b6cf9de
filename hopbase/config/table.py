"""The model → deployment table of ``hopbase check``."""

from __future__ import annotations

from hopbase.config.schema import Config


def format_table(config: Config) -> str:
    """The model → deployment table that ``hopbase check`` prints, columns aligned."""
    rows = [("model", "deployment", "provider", "upstream model", "weight", "max_in_flight",
             "status")]
    for name, model in config.models.items():
        for deployment in model.deployments:
            rows.append((
                name, deployment.id, deployment.provider, deployment.upstream_model,
                f"{deployment.weight:g}",
                str(deployment.max_in_flight) if deployment.max_in_flight else "unlimited",
                "enabled" if deployment.enabled else f"disabled: {deployment.disabled_reason}"))
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]) - 1)]
    lines = []
    for row in rows:
        padded = [cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=True)]
        lines.append("  ".join([*padded, row[-1]]))
    return "\n".join(lines)
