#!/usr/bin/env python3
# The canonical durable-queue program of RabbitMQ's tutorials, unchanged
# but for where the broker is: AMQP_HOST and AMQP_PORT (default
# localhost:5672). Run against `keel serve`; the message survives a restart.
import os

import pika

params = pika.ConnectionParameters(host=os.environ.get('AMQP_HOST', 'localhost'),
                                   port=int(os.environ.get('AMQP_PORT', '5672')))
connection = pika.BlockingConnection(params)
channel = connection.channel()
channel.confirm_delivery()

channel.queue_declare(queue='my_durable_queue', durable=True)
channel.basic_publish(exchange='', routing_key='my_durable_queue', body='Hello, durable queue!',
                      properties=pika.BasicProperties(delivery_mode=2))
print(" [x] Sent 'Hello, durable queue!'")
connection.close()
