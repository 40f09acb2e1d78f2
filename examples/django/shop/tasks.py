"""The example's tasks: one of each kind the backend supports."""

import os

try:
    from django.tasks import task
except ImportError:  # Django before 6: the django-tasks backport
    from django_tasks import task


@task
def add(a, b):
    return a + b


@task(queue_name="emails")
async def greet(name):
    return f"hello {name}"


@task
def charge(cents):
    raise ValueError(f"card declined for {cents} cents")


@task(takes_context=True)
def whoami(context):
    return {"attempt": context.attempt, "id": context.task_result.id}


@task
def note(label):
    """Append ``label`` to the file ``$NOTES`` (the order tasks ran in)."""
    with open(os.environ["NOTES"], "a", encoding="utf-8") as notes:
        notes.write(label + "\n")
    return label
