-- MLflow keeps its own database beside Prefect's in the same Postgres.
CREATE DATABASE mlflow;
