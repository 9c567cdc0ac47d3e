"""A small shop: the app whose test suite shows the testing kit (tests/)."""

from __future__ import annotations

from flask import Flask, request
from flask_sqlalchemy import SQLAlchemy
from sqlalchemy.orm import Mapped, mapped_column

from flask_ratchet import JobContext, Ratchet

db = SQLAlchemy()
ratchet = Ratchet()


class Order(db.Model):  # type: ignore[name-defined,misc]
    id: Mapped[int] = mapped_column(primary_key=True)
    email: Mapped[str]
    receipt_sent: Mapped[bool] = mapped_column(default=False)


@ratchet.task(queue="mail", max_retries=2)
def send_receipt(order_id: int) -> str:
    order = db.session.get(Order, order_id)
    if order is None:
        raise LookupError(f"no order {order_id}")
    order.receipt_sent = True
    db.session.commit()
    return f"receipt for order {order_id} sent to {order.email}"


@ratchet.task
async def score_fraud(order_id: int, ctx: JobContext) -> int:
    ctx.logger.info("scoring order %d", order_id)
    return order_id % 7


def create_app(**config: object) -> Flask:
    app = Flask(__name__)
    app.config["SQLALCHEMY_DATABASE_URI"] = "sqlite:///shop.db"
    app.config.update(config)
    db.init_app(app)
    ratchet.init_app(app)
    with app.app_context():
        db.create_all()

    @app.post("/orders")
    def place_order() -> tuple[str, int]:
        order = Order(email=request.form["email"])
        db.session.add(order)
        db.session.flush()
        send_receipt.enqueue(order.id)
        score_fraud.builder(order.id).with_priority(3).submit()
        db.session.commit()  # the order and its jobs appear together
        return str(order.id), 201

    return app
