// orders.js: the "orders" collection into the Meilisearch index "orders",
// each order carrying its customer's name and city and its products'
// names, joined from the "customers" and "products" collections by
// declared lookups. A change to a customer or a product sends the orders
// that show it again, so renaming a product renames it in every order's
// search document.
module.exports = {
  collection: "orders",
  index: "orders",
  settings: {
    searchableAttributes: ["customer", "products", "city"],
    filterableAttributes: ["city", "status"],
    sortableAttributes: ["total"],
  },

  lookups: {
    customer: { from: "customers", localField: "customerId", foreignField: "_id", project: { name: 1, city: 1 } },
    products: { from: "products", localField: "items.productId", foreignField: "_id", project: { name: 1 }, many: true },
  },

  transform(doc, ctx) {
    const c = ctx.lookups.customer;
    return {
      status: doc.status,
      customer: c ? c.name : null,
      city: c ? c.city : null,
      products: ctx.lookups.products.map(p => p.name),
      total: (doc.items || []).reduce((sum, it) => sum + (it.price || 0) * (it.qty || 1), 0),
    };
  },

  // For `meilistream check`: the orders it runs, and the related documents
  // their lookups find.
  samples: [
    {
      _id: 1001,
      status: "paid",
      customerId: { $oid: "65f1c0a2b3c4d5e6f7a8b9e0" },
      items: [{ productId: 1, qty: 2, price: 25.5 }, { productId: 2, qty: 1, price: 50 }],
    },
  ],
  related: {
    customers: [{ _id: { $oid: "65f1c0a2b3c4d5e6f7a8b9e0" }, name: "Grace", city: "Arlington", email: "grace@example.com" }],
    products: [{ _id: 1, name: "Kettle" }, { _id: 2, name: "Gift card" }],  // products.js's samples
  },
};
