"""workloads/bucket_access.py: the grants on a bucket the stack does not own, and the check before them."""

from __future__ import annotations

from workloads.bucket_access import WRITE_ROLE, grants, uniform_access_problem


def test_only_the_write_grant_is_conditional() -> None:
    made = grants("weights", "xla_cache/")
    assert [g.role for g in made if g.condition is not None] == [WRITE_ROLE]
    assert all(g.condition is None for g in grants("weights", None))


def test_a_bucket_without_uniform_access_is_refused_by_name_with_the_fix() -> None:
    assert uniform_access_problem("weights", True) is None
    for off in (False, None):  # None: GCS returned no iamConfiguration, i.e. not enabled
        problem = uniform_access_problem("weights", off)
        assert problem is not None
        assert problem.startswith("serving.model.weightsBucket 'weights': uniform bucket-level access is off")
        assert "gcloud storage buckets update gs://weights --uniform-bucket-level-access" in problem
