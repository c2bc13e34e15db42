"""Export a run's kernel (or a seed itself) as a standalone wheel with a parity certificate.

The wheel is built from ``template/`` (files ending in ``.tmpl``, rendered
with jinja2, so that none of them is importable as part of tik-agent); the
package it holds imports torch and triton only.
"""

from tik_agent.export.builder import BuildFailed, export_seed_wheel, export_wheel, wheel_certificate

__all__ = ["BuildFailed", "export_seed_wheel", "export_wheel", "wheel_certificate"]
