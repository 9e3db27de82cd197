"""analyze-repository: scan structure -> dependencies -> patterns -> report.

The analysis steps read only; the report step may write, and the runner
writes ``shep-analysis.md`` from its result when the agent did not.
"""

from __future__ import annotations

from shep.workflows.base import AgentStep, StepState, Workflow, linear

ANALYSIS_FILE = "shep-analysis.md"
#: What shep itself leaves in a user's checkout: analyze-repository's report. Left
#: untracked there, it is no change of the user's that a feature must wait for, to
#: start or to merge (unless the feature's branch writes that same path).
SHEP_OUTPUTS: tuple[str, ...] = (ANALYSIS_FILE,)


class AnalyzeState(StepState, total=False):
    """analyze-repository needs nothing beyond the agent steps' own keys."""


STEPS = (
    AgentStep(
        name="scan",
        title="Scan structure",
        instruction=(
            "You are analyzing the repository at {repo} (read only: do not change files).\n"
            "Its files:\n{tree}\n\n"
            "Describe its structure: what the project is, the top-level layout, the main "
            "packages or modules and what each is for, entry points, and how it is built "
            "and tested. Be concise: headings and bullet points."
        ),
    ),
    AgentStep(
        name="dependencies",
        title="Dependencies",
        instruction=(
            "Still in {repo} (read only). List the project's dependencies, runtime and "
            "development: where they are declared, notable versions or pins, and risks "
            "(unpinned, outdated, heavy, duplicated). Be concise."
        ),
    ),
    AgentStep(
        name="patterns",
        title="Patterns",
        instruction=(
            "Still in {repo} (read only). Describe the architecture and code patterns: "
            "layering, error handling, configuration, testing style, conventions, and the "
            "smells most worth fixing. Be concise."
        ),
    ),
    AgentStep(
        name="report",
        title="Report",
        writes=True,
        artifact=ANALYSIS_FILE,
        instruction=(
            "Write the final analysis of {repo} as a Markdown document titled "
            "'# Repository analysis: {repo_name}'. Combine the structure, dependencies and "
            "patterns found in the earlier steps, then end with a short summary and a "
            "prioritized list of recommendations. Save it as " + ANALYSIS_FILE + " in the "
            "repository root if you can write files, and reply with the full Markdown."
        ),
    ),
)

ANALYZE_REPOSITORY = Workflow(
    name="analyze-repository",
    description="Analyze a repository (structure, dependencies, patterns) and write "
    f"{ANALYSIS_FILE}.",
    steps=STEPS,
    build=linear(STEPS, AnalyzeState),
)
