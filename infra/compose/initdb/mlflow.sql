-- MLflow's databases beside Prefect's in the same Postgres: runs/metrics, and basic-auth users + permissions.
CREATE DATABASE mlflow;
CREATE DATABASE mlflow_auth;
